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
    * English abbreviations ("Dr." → "doctor", case-insensitive) and English numbers (money,
      pounds, percent, decimals, ordinals, years and integers: "In 1984 he paid $3.50" → "In
      nineteen eighty four he paid three dollars and fifty cents") for the english cleaner and,
      in the multilingual cleaner, for languages whose code starts with "en". Each of Python's
      passes (expand_english_numbers) is one graph pass in the same order: the matches of its
      pattern are cut out with a separator, spelled out by vectorised integer arithmetic and
      string lookups, and joined back.
    * diacritics removed (english cleaner): a per-character table built from Python's
      NFKD-and-drop-combining-marks, so "café" → "cafe" and "ﬁ" → "fi" exactly as in Python.
    * lower case: tf.strings.lower(encoding="utf-8") (ICU full case mapping, same as str.lower
      on every text tried, including "İ" and final sigma).
  not in the graph
    * phonemes (espeak-ng is a program, not a TF op): phoneme models export token-id signatures
      only.
  approximations (documented differences from Python)
    * NFC is only applied to letters of the vocabulary written in NFC or NFD; other canonically
      equivalent orderings of several combining marks stay decomposed (and are rejected as
      unknown characters). Hangul syllables next to conjoining jamo are not recomposed.
    * `\\b` in the abbreviation and ordinal patterns is ASCII in RE2 and Unicode in Python:
      "émr." is expanded in the graph, not in Python.
    * Numbers: only ASCII digits are spelled out (Python also reads other scripts' digits), and
      integers of at most 18 digits; longer digit runs stay digits and are rejected as
      characters outside the vocabulary. A money amount with two decimal points ("$1.2.3"),
      which Python's cleaner fails on, is read as dollars and the cents before the second point.

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


# ---- English numbers (myxtts.data.text.expand_english_numbers as graph ops) -------------------

_MARK = "\x1f"  # cuts matches out of a text; _normalize turned every \x1f into a space before
_ONES = text_lib._ONES  # pylint: disable=protected-access
_TENS = text_lib._TENS  # pylint: disable=protected-access
_SCALE_NAMES = [(10 ** 9, "billion"), (10 ** 6, "million"), (1000, "thousand"), (1, "")]
_MAX_DIGITS = 18  # int64 holds every 18-digit integer


def _join_words(parts: Sequence[tf.Tensor]) -> tf.Tensor:
    """[N] strings of words joined by one space, empty parts left out."""
    joined = tf.strings.reduce_join(tf.stack(list(parts), axis=1), axis=1, separator=" ")
    return tf.strings.regex_replace(tf.strings.regex_replace(joined, " +", " "), "^ | $", "")


def _below_thousand(n: tf.Tensor) -> tf.Tensor:
    """Words for int64 [N] values 0..999 ("" for 0)."""
    hundreds, rest = n // 100, n % 100
    ones = tf.gather(_ONES, tf.minimum(rest, 19))
    tens = _join_words([tf.gather(_TENS, rest // 10),
                        tf.where(rest % 10 > 0, tf.gather(_ONES, rest % 10), "")])
    return _join_words([
        tf.where(hundreds > 0, tf.strings.join([tf.gather(_ONES, hundreds), " hundred"]), ""),
        tf.where(rest == 0, "", tf.where(rest < 20, ones, tens))])


def _below_trillion(n: tf.Tensor) -> tf.Tensor:
    """Words for int64 [N] values 0..10^12 - 1 ("" for 0)."""
    parts = []
    for value, name in _SCALE_NAMES:
        chunk = (n // value) % 1000
        words = _below_thousand(chunk)
        parts.append(tf.where(chunk > 0, tf.strings.join([words, " ", name]) if name else words,
                              ""))
    return _join_words(parts)


def _number_words(n: tf.Tensor) -> tf.Tensor:
    """text_lib.number_to_words for int64 [N] values 0..10^18 - 1."""
    trillions = n // 10 ** 12
    words = _join_words([
        tf.where(trillions > 0, tf.strings.join([_below_trillion(trillions), " trillion"]), ""),
        _below_trillion(n % 10 ** 12)])
    return tf.where(tf.equal(n, 0), "zero", words)


def _to_int(digits: tf.Tensor) -> tf.Tensor:
    """int64 values of [N] ASCII digit strings ("" → 0; more than _MAX_DIGITS digits → 0, which
    `_too_long` keeps as digits)."""
    digits = tf.where(tf.equal(digits, "") | _too_long(digits), "0", digits)
    return tf.strings.to_number(digits, tf.int64)


def _too_long(digits: tf.Tensor) -> tf.Tensor:
    return tf.strings.length(digits) > _MAX_DIGITS


def _integer_words(digits: tf.Tensor) -> tf.Tensor:
    """text_lib._expand_integer: a four-digit 1100..2099 is read as a year."""
    n = _to_int(digits)
    tail = n % 100
    year = _join_words([_number_words(n // 100),
                        tf.where(tail < 10, tf.strings.join(["oh ", tf.gather(_ONES, tail % 10)]),
                                 _number_words(tail))])
    is_year = ((tf.strings.length(digits) == 4) & (n >= 1100) & (n < 2100) &
               (n % 100 != 0) & ~((n >= 2000) & (n < 2010)))
    return tf.where(_too_long(digits), digits, tf.where(is_year, year, _number_words(n)))


def _ordinal_words(digits: tf.Tensor) -> tf.Tensor:
    """text_lib._ordinal_words: the last word becomes its ordinal."""
    words = _number_words(_to_int(digits))
    out = tf.where(tf.strings.regex_full_match(words, ".*y"),
                   tf.strings.regex_replace(words, "y$", "ieth"),
                   tf.strings.join([words, "th"]))
    for cardinal, ordinal in text_lib._ORDINAL_WORDS.items():  # pylint: disable=protected-access
        out = tf.where(tf.strings.regex_full_match(words, f"(.* )?{cardinal}"),
                       tf.strings.regex_replace(words, f"{cardinal}$", ordinal), out)
    return tf.where(_too_long(digits), digits, out)


def _digit_words(digits: tf.Tensor) -> tf.Tensor:
    """"05" → "zero five": each digit as its word."""
    for d in range(10):
        digits = tf.strings.regex_replace(digits, str(d), f" {_ONES[d]}")
    return tf.strings.regex_replace(digits, "^ ", "")


def _money_words(amount: tf.Tensor) -> tf.Tensor:
    """text_lib._expand_money for the digits and points after "$"."""
    whole = tf.strings.regex_replace(amount, r"\..*", "")
    cents = tf.strings.regex_replace(amount, r"^[^.]*\.?", "")
    has_cents = tf.strings.length(cents) > 0
    cents = tf.strings.substr(tf.strings.join([tf.strings.regex_replace(cents, r"\..*", ""),
                                               "00"]), 0, 2)
    dollars = _to_int(whole)
    cent_value = tf.where(has_cents, _to_int(cents), tf.zeros_like(dollars))
    dollar_words = tf.strings.join([_number_words(dollars), " dollar",
                                    tf.where(tf.equal(dollars, 1), "", "s")])
    cent_words = tf.strings.join([_number_words(cent_value), " cent",
                                  tf.where(tf.equal(cent_value, 1), "", "s")])
    show_dollars = (dollars > 0) | (cent_value == 0)
    words = tf.where(show_dollars & (cent_value > 0),
                     tf.strings.join([dollar_words, " and ", cent_words]),
                     tf.where(show_dollars, dollar_words, cent_words))
    return tf.where(_too_long(whole), amount, words)


def _spell(texts: tf.Tensor, pattern: str, words) -> tf.Tensor:
    """Every match of RE2 `pattern` in [B] `texts` (its first group: what `words` reads;
    the rest of the match is dropped) replaced by `words(groups [N]) -> [N]`."""
    cut = tf.strings.regex_replace(texts, pattern, f"{_MARK}\\1{_MARK}")
    pieces = tf.strings.split(cut, sep=_MARK)
    flat = pieces.flat_values
    odd = tf.equal(tf.ragged.range(pieces.row_lengths()).flat_values % 2, 1)
    spelled = tf.where(odd, words(tf.where(odd, flat, "")), flat)
    return tf.strings.reduce_join(pieces.with_flat_values(spelled), axis=-1)


def _decimal_words(number: tf.Tensor) -> tf.Tensor:
    """text_lib._expand_decimal: "3.05" → "three point zero five"."""
    whole = tf.strings.regex_replace(number, r"\..*", "")
    words = _join_words([_number_words(_to_int(whole)), tf.fill(tf.shape(number), "point"),
                         _digit_words(tf.strings.regex_replace(number, r"^[^.]*\.", ""))])
    return tf.where(_too_long(whole), number, words)


def _drop_thousands_commas(texts: tf.Tensor) -> tf.Tensor:
    """Python's (?<=\\d),(?=\\d{3}(?!\\d)) (RE2 has no look-around): every comma after a digit
    and before exactly three digits is dropped, each judged on the text as given."""
    chars = tf.strings.unicode_split(texts, "UTF-8").to_tensor(default_value="")
    length = tf.shape(chars)[1]
    rows = tf.shape(chars)[0]
    padded = tf.concat([tf.fill([rows, 1], ""), chars, tf.fill([rows, 4], "")], axis=1)
    digit = tf.strings.regex_full_match(padded, "[0-9]")

    def shifted(offset):  # digit[:, i + offset] for the characters i of `chars`
        return digit[:, 1 + offset: 1 + offset + length]

    drop = (tf.equal(chars, ",") & shifted(-1) & shifted(1) & shifted(2) & shifted(3)
            & ~shifted(4))
    return tf.strings.reduce_join(tf.where(drop, "", chars), axis=1)


def english_numbers(texts: tf.Tensor) -> tf.Tensor:
    """text_lib.expand_english_numbers as graph ops, pass by pass ([B] string → [B] string)."""
    texts = _drop_thousands_commas(texts)
    texts = tf.strings.regex_replace(texts, "\u00a3([0-9.]+)", r"\1 pounds")
    texts = _spell(texts, r"\$([0-9.]*[0-9])", _money_words)
    texts = tf.strings.regex_replace(texts, r"([0-9]+(?:\.[0-9]+)?)\s*%", r"\1 percent")
    texts = _spell(texts, r"([0-9]+\.[0-9]+)", _decimal_words)
    texts = _spell(texts, r"\b([0-9]+)(?:st|nd|rd|th)\b", _ordinal_words)
    return _spell(texts, r"([0-9]+)", _integer_words)


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
        for abbreviation, full in text_lib._ABBREVIATIONS.items():  # pylint: disable=protected-access
            texts = tf.strings.regex_replace(texts, rf"(?i)\b{abbreviation}\.", full)
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
            texts = tf.where(english, self._normalize(
                english_numbers(self._abbreviations(texts))), texts)
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
                ["Characters outside the model's vocabulary after cleaning. Per text:",
                 unknown],
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
