"""The character front end as TensorFlow ops (tf.strings + lookup tables), for the SavedModel.

A TF Serving client sends plain text; this module turns it into the ids `Tokenizer.encode(
clean_text(text, cleaner, language))` gives, inside the graph. What runs in the graph and what
does not, per step of myxtts.data.text's cleaners:

  in the graph
    * NFC composition of the vocabulary's letters: each letter's decomposed (NFD) spelling, in
      upper and lower case, is replaced by the composed letter (one regex per letter).
    * typographic quotes, dashes, ellipsis and no-break space → ASCII (the same table).
    * whitespace collapsed to one space and stripped; "whitespace" is exactly the set Python's
      `\\s` matches (computed from Python when the graph is built).
    * English abbreviations ("Dr." → "doctor", case-insensitive) for the english cleaner and, in
      the multilingual cleaner, for languages whose code starts with "en".
    * diacritics removed (english cleaner): a per-character table built from Python's
      NFKD-and-drop-combining-marks, so "café" → "cafe" and "ﬁ" → "fi" exactly as in Python.
    * lower case: tf.strings.lower(encoding="utf-8") (ICU full case mapping, same as str.lower
      on every text tried, including "İ" and final sigma).
  not in the graph
    * English number, money, percent and ordinal expansion ("42" → "forty two"). Digits are not
      in any vocabulary, so an English text with digits is REJECTED by the graph with an
      InvalidArgument error naming the characters; spell numbers out client-side (or use the
      token-id signature with myxtts.data.text.Tokenizer).
    * phonemes (espeak-ng is a program, not a TF op): phoneme models export token-id signatures
      only.
  approximations (documented differences from Python)
    * NFC is only applied to letters of the vocabulary written in NFC or NFD; other canonically
      equivalent orderings of several combining marks stay decomposed (and are rejected as
      unknown characters). Hangul syllables next to conjoining jamo are not recomposed.
    * `\\b` in the abbreviation patterns is ASCII in RE2 and Unicode in Python: "émr." is
      expanded in the graph, not in Python.

Characters outside the vocabulary after cleaning make the graph fail the request with a message
listing them (the synthesizer raises UnknownCharactersError for the same texts) instead of
silently dropping them like Tokenizer.encode. Unknown languages and empty texts fail likewise.
"""

from __future__ import annotations

import re
import unicodedata
from typing import List, Sequence, Tuple

import tensorflow as tf

from myxtts.data import text as text_lib

# A noncharacter: the lookup default meaning "no replacement". A text containing it is still
# translated correctly, since keeping the character and emitting the sentinel are the same.
_NO_REPLACEMENT = "\uffff"


def _re2_literal(text: str) -> str:
    """`text` as an RE2 literal: ASCII letters and digits as is, everything else \\x{...}."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def _python_whitespace() -> str:
    return "".join(chr(c) for c in range(0x110000)
                   if not 0xD800 <= c < 0xE000 and re.match(r"\s", chr(c)))


def _diacritics_table() -> Tuple[List[str], List[str]]:
    """Characters that the english cleaner's strip_diacritics (+ the NFC that follows it)
    changes, and what each becomes."""
    keys, values = [], []
    for code in range(0x110000):
        if 0xD800 <= code < 0xE000:
            continue
        char = chr(code)
        stripped = unicodedata.normalize("NFC", text_lib.strip_diacritics(char))
        if stripped != char:
            keys.append(char)
            values.append(stripped)
    return keys, values


def _string_table(keys: Sequence[str], values: Sequence[str]) -> tf.lookup.StaticHashTable:
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(list(keys), tf.string),
                                            tf.constant(list(values), tf.string)),
        default_value=_NO_REPLACEMENT)


class InGraphTokenizer(tf.Module):
    """`tokenizer(texts [B] string, languages [B] string) -> (tokens [B, T] int32 (0-padded),
    token_lengths [B] int32, language_ids [B] int32)`, all TensorFlow ops."""

    def __init__(self, tokenizer: text_lib.Tokenizer, languages: Sequence[str],
                 max_tokens: int, name: str = "in_graph_tokenizer"):
        super().__init__(name=name)
        if tokenizer.use_phonemes:
            raise ValueError("Phoneme vocabularies cannot be tokenized inside a graph.")
        self.cleaner = tokenizer.cleaner
        self.languages = list(languages)
        self.max_tokens = max_tokens
        symbols = tokenizer.symbols[1:]
        self._vocabulary = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(symbols, tf.string),
                                                tf.range(1, len(symbols) + 1, dtype=tf.int32)),
            default_value=0)
        self._language_ids = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(self.languages, tf.string),
                tf.range(len(self.languages), dtype=tf.int32)), default_value=-1)
        self._english_ids = tf.constant(
            [i for i, code in enumerate(self.languages)
             if self.cleaner == "english" or code.split("-")[0].lower() == "en"] or [-2],
            tf.int32)
        self._whitespace = f"[{_re2_literal(_python_whitespace())}]+"
        self._compositions = self._vocabulary_compositions(symbols)
        self._diacritics = _string_table(*_diacritics_table()) if self.cleaner == "english" \
            else None

    # ---- building blocks -------------------------------------------------------------------
    def _vocabulary_compositions(self, symbols: Sequence[str]) -> List[Tuple[str, str]]:
        if self.cleaner == "english":  # NFKD follows; composing first changes nothing
            return []
        pairs = []
        for symbol in symbols:
            for char in {symbol, symbol.upper()}:
                if len(char) != 1:
                    continue
                decomposed = unicodedata.normalize("NFD", char)
                if decomposed != char:
                    pairs.append((_re2_literal(decomposed), char))
        return pairs

    def _normalize(self, texts: tf.Tensor) -> tf.Tensor:
        """normalize_unicode minus NFC: typographic → ASCII, whitespace collapsed, stripped."""
        for source, target in text_lib._TYPOGRAPHIC.items():  # pylint: disable=protected-access
            texts = tf.strings.regex_replace(texts, _re2_literal(chr(source)), target)
        texts = tf.strings.regex_replace(texts, self._whitespace, " ")
        return tf.strings.regex_replace(texts, "^ | $", "")

    @staticmethod
    def _abbreviations(texts: tf.Tensor) -> tf.Tensor:
        for pattern, full in text_lib._ABBREVIATIONS:  # pylint: disable=protected-access
            # The Python pattern (r"\bmrs\.") is valid RE2; IGNORECASE becomes (?i).
            texts = tf.strings.regex_replace(texts, "(?i)" + pattern.pattern, full)
        return texts

    def _strip_diacritics(self, texts: tf.Tensor) -> tf.Tensor:
        chars = tf.strings.unicode_split(texts, "UTF-8")
        mapped = self._diacritics.lookup(chars.flat_values)
        kept = tf.where(tf.equal(mapped, _NO_REPLACEMENT), chars.flat_values, mapped)
        return tf.strings.reduce_join(chars.with_flat_values(kept), axis=-1)

    # ---- the front end ---------------------------------------------------------------------
    def clean(self, texts: tf.Tensor, language_ids: tf.Tensor) -> tf.Tensor:
        """The cleaner's in-graph steps (module docstring), [B] string → [B] string."""
        for decomposed, composed in self._compositions:
            texts = tf.strings.regex_replace(texts, decomposed, composed)
        texts = self._normalize(texts)
        if self.cleaner in ("english", "multilingual"):
            english = tf.reduce_any(tf.equal(language_ids[:, None], self._english_ids[None]),
                                    axis=1)
            texts = tf.where(english, self._abbreviations(texts), texts)
        if self._diacritics is not None:
            texts = self._normalize(self._strip_diacritics(texts))
        return tf.strings.lower(texts, encoding="utf-8")

    def __call__(self, texts, languages):
        texts = tf.convert_to_tensor(texts, tf.string)
        languages = tf.convert_to_tensor(languages, tf.string)
        language_ids = self._language_ids.lookup(languages)
        known = tf.debugging.Assert(
            tf.reduce_all(language_ids >= 0),
            [f"Unknown language; this model knows {', '.join(self.languages)}. Got:",
             languages], summarize=64)
        with tf.control_dependencies([known]):
            chars = tf.strings.unicode_split(self.clean(texts, language_ids), "UTF-8")
        ids = chars.with_flat_values(self._vocabulary.lookup(chars.flat_values))
        unknown = tf.strings.reduce_join(tf.ragged.boolean_mask(chars, tf.equal(ids, 0)),
                                         axis=-1, separator=" ")
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        checks = [
            tf.debugging.Assert(
                tf.reduce_all(tf.equal(unknown, "")),
                ["Characters outside the model's vocabulary after cleaning (numbers are not "
                 "spelled out inside the graph: write them as words). Per text:", unknown],
                summarize=64),
            tf.debugging.Assert(tf.reduce_all(lengths > 0),
                                ["A text is empty after cleaning. Token counts:", lengths],
                                summarize=64),
            tf.debugging.Assert(
                tf.reduce_all(lengths <= self.max_tokens),
                [f"A text is longer than the model's {self.max_tokens} tokens "
                 f"(model.max_text_positions); split it. Token counts:", lengths],
                summarize=64),
        ]
        with tf.control_dependencies(checks):
            return (tf.identity(ids.to_tensor(default_value=0)), tf.identity(lengths),
                    tf.identity(language_ids))
