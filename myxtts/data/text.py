"""Text front end: Unicode normalisation, cleaners, optional phonemes, the character tokenizer.

Cleaners (data.text_cleaners):
  basic         NFC, lower case, typographic quotes/dashes to ASCII, whitespace collapsed.
  english       basic + English abbreviations and numbers spelled out + diacritics removed
                ("café" → "cafe"), for English-only datasets.
  multilingual  basic, keeping letters with diacritics ("über", "año"); rows whose language is
                English also get the English abbreviation and number expansion.

The tokenizer maps characters (or phoneme symbols) to ids; id 0 is padding. Its vocabulary is a
base alphabet plus every character of the cleaned training texts, saved as JSON (`vocab.json`) with
the checkpoints so a resumed or exported model never silently gets different ids.
This module does not import TensorFlow.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Dict, Iterable, List, Optional, Sequence

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError

PAD = "<pad>"
VOCAB_FORMAT = "myxtts-char-vocab"
PUNCTUATION = " !'(),-.:;?\""
BASE_ALPHABET = PUNCTUATION + "abcdefghijklmnopqrstuvwxyz"

_TYPOGRAPHIC = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                              "\u201e": '"', "\u00ab": '"', "\u00bb": '"', "\u2013": "-",
                              "\u2014": "-", "\u2026": "...", "\u00a0": " "})
_WHITESPACE = re.compile(r"\s+")

_ABBREVIATIONS = dict([
    ("mrs", "misess"), ("mr", "mister"), ("dr", "doctor"), ("st", "saint"), ("co", "company"),
    ("jr", "junior"), ("maj", "major"), ("gen", "general"), ("drs", "doctors"),
    ("rev", "reverend"), ("lt", "lieutenant"), ("hon", "honorable"), ("sgt", "sergeant"),
    ("capt", "captain"), ("esq", "esquire"), ("ltd", "limited"), ("col", "colonel"),
    ("ft", "fort"), ("vs", "versus"), ("etc", "et cetera")])
_ABBREVIATION = re.compile(r"\b(" + "|".join(_ABBREVIATIONS) + r")\.", re.IGNORECASE)
_DIGIT = re.compile(r"\d")

_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
         "eighteen", "nineteen"]
_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES = [(10 ** 12, "trillion"), (10 ** 9, "billion"), (10 ** 6, "million"),
           (1000, "thousand")]
_ORDINAL_WORDS = {"one": "first", "two": "second", "three": "third", "five": "fifth",
                  "eight": "eighth", "nine": "ninth", "twelve": "twelfth"}


class TextError(MyXTTSError, ValueError):
    """A text front-end problem (phonemizer missing, vocabulary file unreadable)."""


# ---- numbers ---------------------------------------------------------------------------------

def number_to_words(n: int) -> str:
    """English words for a non-negative integer: 1984 → 'one thousand nine hundred eighty four'."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_to_words(rest))
    for value, name in _SCALES:
        if n >= value:
            rest = n % value
            head = number_to_words(n // value) + " " + name
            return head + ("" if rest == 0 else " " + number_to_words(rest))
    raise AssertionError(n)


def _year_words(n: int) -> str:
    if n % 100 == 0 or 2000 <= n < 2010:
        return number_to_words(n)
    tail = n % 100
    return number_to_words(n // 100) + " " + ("oh " + _ONES[tail] if tail < 10
                                              else number_to_words(tail))


def _ordinal_words(n: int) -> str:
    words = number_to_words(n).split(" ")
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _expand_money(m: re.Match) -> str:
    whole, _, cents = m.group(1).replace(",", "").partition(".")
    dollars = int(whole or 0)
    cents_value = int((cents + "00")[:2]) if cents else 0
    parts = []
    if dollars or not cents_value:
        parts.append(f"{number_to_words(dollars)} dollar{'' if dollars == 1 else 's'}")
    if cents_value:
        parts.append(f"{number_to_words(cents_value)} cent{'' if cents_value == 1 else 's'}")
    return " and ".join(parts)


def _expand_decimal(m: re.Match) -> str:
    whole, frac = m.group(1), m.group(2)
    return number_to_words(int(whole)) + " point " + " ".join(_ONES[int(d)] for d in frac)


def _expand_integer(m: re.Match) -> str:
    n = int(m.group(0))
    if 1100 <= n < 2100 and len(m.group(0)) == 4:
        return _year_words(n)
    return number_to_words(n)


def expand_english_numbers(text: str) -> str:
    """Spells out money, percentages, ordinals, decimals and integers in English words."""
    if not _DIGIT.search(text):
        return text
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    text = re.sub(r"£([\d.]+)", lambda m: m.group(1) + " pounds", text)
    text = re.sub(r"\$([\d.]*\d)", _expand_money, text)
    text = re.sub(r"(\d+(?:\.\d+)?)\s*%", r"\1 percent", text)
    text = re.sub(r"(\d+)\.(\d+)", _expand_decimal, text)
    text = re.sub(r"\b(\d+)(st|nd|rd|th)\b", lambda m: _ordinal_words(int(m.group(1))), text)
    return re.sub(r"\d+", _expand_integer, text)


def expand_english_abbreviations(text: str) -> str:
    return _ABBREVIATION.sub(lambda m: _ABBREVIATIONS[m.group(1).lower()], text)


# ---- cleaners ----------------------------------------------------------------------------------

def normalize_unicode(text: str) -> str:
    """NFC composition, typographic punctuation to ASCII, whitespace collapsed and stripped."""
    text = unicodedata.normalize("NFC", text).translate(_TYPOGRAPHIC)
    return _WHITESPACE.sub(" ", text).strip()


def strip_diacritics(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def basic_cleaner(text: str, language: str = "en") -> str:
    del language
    return normalize_unicode(text).lower()


def english_cleaner(text: str, language: str = "en") -> str:
    del language
    text = expand_english_numbers(expand_english_abbreviations(normalize_unicode(text)))
    return normalize_unicode(strip_diacritics(text)).lower()


def multilingual_cleaner(text: str, language: str = "en") -> str:
    text = normalize_unicode(text)
    if language.split("-")[0].lower() == "en":
        text = expand_english_numbers(expand_english_abbreviations(text))
    return normalize_unicode(text).lower()


CLEANERS = {"basic": basic_cleaner, "english": english_cleaner,
            "multilingual": multilingual_cleaner}


def clean_text(text: str, cleaner: str, language: str = "en") -> str:
    return CLEANERS[cleaner](text, language)


def is_speakable(char: str) -> bool:
    """Letters, combining marks and the base punctuation; other symbols (emoji, '§', control
    characters) are outside any vocabulary and get reported by validation."""
    return char in PUNCTUATION or unicodedata.category(char)[0] in ("L", "M")


# ---- phonemes ----------------------------------------------------------------------------------

def phonemizer_available() -> bool:
    try:
        from phonemizer.backend import EspeakBackend  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False
    return bool(EspeakBackend.is_available())


class Phonemizer:
    """phonemizer + espeak-ng, feature-detected: a clear error when requested but missing."""

    ESPEAK_LANGUAGES = {"en": "en-us"}

    def __init__(self):
        if not phonemizer_available():
            raise TextError(
                "data.use_phonemes is true but phonemes need the `phonemizer` package and the "
                "espeak-ng program: install them with `pip install phonemizer` and "
                "`apt-get install espeak-ng` (or `pip install -e .[phonemes]`), or set "
                "data.use_phonemes: false to train on characters.")
        from phonemizer.backend import EspeakBackend  # pylint: disable=import-outside-toplevel
        self._backend_cls = EspeakBackend
        self._backends: Dict[str, object] = {}

    def __call__(self, texts: Sequence[str], language: str) -> List[str]:
        code = self.ESPEAK_LANGUAGES.get(language, language)
        if code not in self._backends:
            self._backends[code] = self._backend_cls(code, preserve_punctuation=True,
                                                     with_stress=True)
        return [normalize_unicode(p) for p in self._backends[code].phonemize(list(texts))]


# ---- tokenizer ---------------------------------------------------------------------------------

class Tokenizer:
    """Characters (or phoneme symbols) → ids. Id 0 is padding; unknown characters are dropped
    (validation reports them before training)."""

    def __init__(self, symbols: Sequence[str], cleaner: str, use_phonemes: bool = False):
        if len(set(symbols)) != len(symbols) or PAD in symbols:
            raise TextError("Tokenizer symbols must be unique and must not contain the padding "
                            "symbol.")
        self.symbols = [PAD] + list(symbols)
        self.cleaner = cleaner
        self.use_phonemes = use_phonemes
        self._ids = {s: i for i, s in enumerate(self.symbols)}

    pad_id = 0

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    @classmethod
    def build(cls, texts: Iterable[str], cleaner: str,
              use_phonemes: bool = False) -> "Tokenizer":
        """Base alphabet + every speakable character of the (already cleaned) training texts."""
        return cls([] if use_phonemes else list(BASE_ALPHABET), cleaner,
                   use_phonemes).extended(texts)

    def extended(self, texts: Iterable[str]) -> "Tokenizer":
        """This vocabulary with the speakable characters of `texts` it lacks appended (sorted):
        every existing id is unchanged."""
        seen = set()
        for text in texts:
            seen.update(c for c in text if is_speakable(c) and c not in self._ids)
        return Tokenizer(self.symbols[1:] + sorted(seen), self.cleaner, self.use_phonemes)

    def unknown_characters(self, text: str) -> List[str]:
        return sorted({c for c in text if c not in self._ids})

    def encode(self, text: str) -> List[int]:
        return [self._ids[c] for c in text if c in self._ids and c != PAD]

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.symbols[i] for i in ids if 0 < i < len(self.symbols))

    def to_json(self) -> dict:
        return {"format": VOCAB_FORMAT, "version": 1, "cleaner": self.cleaner,
                "use_phonemes": self.use_phonemes, "pad_id": 0, "symbols": self.symbols}

    def save(self, path: str) -> None:
        """Writes vocab.json atomically (JSON, never pickle)."""
        atomic_write(path, json.dumps(self.to_json(), ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, path: str) -> "Tokenizer":
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TextError(f"Cannot read the tokenizer vocabulary {path}: {e}. It is written "
                            f"next to the checkpoints; restore it or start from a new checkpoint "
                            f"directory.") from None
        if not isinstance(data, dict) or data.get("format") != VOCAB_FORMAT:
            raise TextError(f"{path} is not a myxtts vocabulary file (expected a JSON object "
                            f"with \"format\": \"{VOCAB_FORMAT}\").")
        symbols = data["symbols"]
        if not symbols or symbols[0] != PAD:
            raise TextError(f"{path}: the first symbol must be the padding symbol {PAD!r}.")
        return cls(symbols[1:], data["cleaner"], bool(data.get("use_phonemes", False)))

    def __eq__(self, other) -> bool:
        return isinstance(other, Tokenizer) and self.to_json() == other.to_json()


def language_id(language: str, languages: Sequence[str]) -> Optional[int]:
    """Index of `language` in data.languages, or None when the model does not know it."""
    try:
        return list(languages).index(language)
    except ValueError:
        return None
