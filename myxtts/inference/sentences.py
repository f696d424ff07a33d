"""Sentence splitting before synthesis: a paragraph → its sentences, each its own decode or its
own row of a batch (the model caps the tokens of one text and the frames of one decode), and a
sentence still too long → pieces at clauses, then words. Imports no TensorFlow: the
Synthesizer, a server and an on-device runtime all split text with it.

    split_sentences("Dr. Smith left. He came back!", "en")  # ["Dr. Smith left.", "He came back!"]
    split_sentences(paragraph, "de", 120, length=lambda s: len(encode(s)))

The rule. A sentence ends at a run of . ! ? … (so also "?!" and "..."), optionally followed by
closing quotes or brackets, when whitespace and the next sentence follow (or an opening ¿ ¡,
which belongs to the sentence it opens), or at the end of the text. It does not end after a
single "." when:
  * the word before it is an abbreviation of the language (ABBREVIATIONS; matched
    case-insensitively, for the part of the language code before "-"; none for other languages),
    an initial ("J. R. R. Tolkien": one capital letter, but not a word such as English "I"), or
    dotted single letters ("e.g.", "U.S.");
  * in a language that writes ordinals with a dot (ORDINAL_DOT_LANGUAGES) the word is a number
    and a word follows ("am 3. Mai");
  * in English, "No." comes before a number ("No. 5").
After any run, it does not end when the next sentence starts with a lowercase letter ("etc. and
so on", "Wait... what"). Full-width 。！？ always end a sentence, with no whitespace needed. When
in doubt a sentence goes on: a missed end only makes a longer sentence, which max_length still
bounds, while a false one cuts "Dr. | Smith" in two.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable, List, Optional, Tuple

# Abbreviations (lowercase, without their final "."), by language code. Initials and dotted
# single letters (M., e.g., i.e., z.B., d.h.) need no entry: the initials rule covers them.
ABBREVIATIONS = {
    "en": frozenset({"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "approx",
                     "fig", "mt"}),
    "de": frozenset({"usw", "dr", "hr", "fr", "bzw", "ca", "nr", "prof", "vgl", "ggf", "evtl",
                     "inkl", "str"}),
    "fr": frozenset({"mme", "mlle", "mm", "dr", "etc", "p.ex", "cf"}),
    "es": frozenset({"sr", "sra", "srta", "dr", "dra", "etc", "p.ej", "ud", "uds", "vd", "vds"}),
    "nl": frozenset({"dhr", "mevr", "bijv", "enz", "dr", "drs", "ir", "mr", "prof", "ca", "nr",
                     "o.a", "d.w.z"}),
    "it": frozenset({"sig", "sig.ra", "sig.na", "dott", "prof", "ecc", "ing", "avv"}),
    "pt": frozenset({"sr", "sra", "srta", "dr", "dra", "prof", "etc", "p.ex"}),
    "cs": frozenset({"např", "tj", "atd", "apod", "tzv", "resp", "dr", "ing", "mgr", "prof"}),
}

# Abbreviations that are one only before a number (an English sentence may well end in "no.").
NUMBER_ABBREVIATIONS = {"en": frozenset({"no"})}

# One-letter words that may end a sentence (else taken for an initial), by language code.
LETTER_WORDS = {"en": frozenset({"I"})}

# Languages whose ordinal numbers end in "." ("am 3. Mai", "3. května").
ORDINAL_DOT_LANGUAGES = frozenset({"de", "cs", "sk", "pl", "hu", "da", "no", "nb", "fi", "tr"})

_OPENERS = "\"'“‘„‚«»([{¿¡「『（【《〈"
_CLOSER = "[" + re.escape("\"'”’“‘»«)]}」』）】》〉") + "]"
_END = re.compile(
    rf"(?P<full>[。！？]+{_CLOSER}*)"
    # A run is matched from its start only (linear in a long run of dots); French puts a space
    # before its closing » ("Non ! »").
    rf"|(?<![.!?…])(?P<stops>[.!?…]+)(?P<closers>(?:{_CLOSER}|\s+»)*)(?=\s|\Z|[¿¡])")
# The first character of what follows a sentence end, past whitespace and opening marks.
_FOLLOWING = re.compile(rf"[\s{re.escape(_OPENERS)}]*(.?)")
_DOTTED_LETTERS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")
# Where a clause ends: after , ; : – followed by whitespace (not "1,000" or "3:45"), and after
# — and the full-width marks, which need none.
_CLAUSE_END = re.compile(r"(?<=[—，；：、])(?![—，；：、])|(?<=[,;:–])(?=\s)")
_WORD = re.compile(r"\S+")
# Where a word is cut: between characters, punctuation kept with the one before it ("格；").
_CHARACTER = re.compile(r".[^\w\s]*", re.S)


def split_sentences(text: str, language: str, max_length: Optional[int] = None,
                    length: Callable[[str], int] = len) -> List[str]:
    """The sentences of `text` in order, stripped, none empty (the module docstring has the
    rule); [] for a text of whitespace. `language` is a code such as "en" or "en-us".

    With `max_length`, a sentence whose `length` is more than max_length is cut into pieces of
    at most max_length: at clause marks (, ; : — – and the full-width ，；：、, each kept with the
    piece on its left), a clause still too long at whitespace, a word still too long between
    characters (not before punctuation). Clauses, words and characters are packed greedily, at
    most two `length` calls each, so a paragraph costs calls in proportion to its length. A
    single character longer than max_length stays whole."""
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be at least 1, got {max_length}")
    lang = re.split(r"[-_]", language, maxsplit=1)[0].lower()
    sentences, start = [], 0
    for match in _END.finditer(text):
        if _ends_sentence(text, match, lang):
            sentences.append(text[start:match.end()].strip())
            start = match.end()
    sentences.append(text[start:].strip())
    sentences = [s for s in sentences if s]
    if max_length is None:
        return sentences
    return [piece for s in sentences for piece in _fit(s, max_length, length)]


def _ends_sentence(text: str, match: re.Match, lang: str) -> bool:
    """Whether the terminators of `match` end a sentence (the rule of the module docstring)."""
    if match.group("full"):
        return True
    following = _FOLLOWING.match(text, match.end()).group(1)
    if not following:
        return True
    if following.islower():
        return False
    if match.group("stops") != "." or match.group("closers"):
        return True
    start = match.start()  # of the word before the ".", found without slicing the whole text
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:match.start()].lstrip(_OPENERS)
    if word.lower() in ABBREVIATIONS.get(lang, ()) or _is_initial(word, lang):
        return False
    if word.lower() in NUMBER_ABBREVIATIONS.get(lang, ()) and following.isdigit():
        return False
    return not (lang in ORDINAL_DOT_LANGUAGES and word.isdigit() and following.isalpha())


def _is_initial(word: str, lang: str) -> bool:
    """One capital letter ("J"), not a word of one letter ("I"), or dotted letters ("e.g")."""
    if len(word) == 1:
        return word.isalpha() and word.isupper() and word not in LETTER_WORDS.get(lang, ())
    return bool(_DOTTED_LETTERS.fullmatch(word))


def _fit(sentence: str, max_length: int, length: Callable[[str], int]) -> List[str]:
    """`sentence`, or its pieces at clauses, words, then characters when it is too long."""

    def characters(word: str) -> List[str]:
        return _pack(word, (m.span() for m in _CHARACTER.finditer(word)), max_length, length,
                     lambda character: [character])

    def words(clause: str) -> List[str]:
        return _pack(clause, (m.span() for m in _WORD.finditer(clause)), max_length, length,
                     characters)

    if length(sentence) <= max_length:
        return [sentence]
    bounds = sorted({0, len(sentence), *(m.start() for m in _CLAUSE_END.finditer(sentence))})
    return _pack(sentence, zip(bounds, bounds[1:]), max_length, length, words)


def _pack(text: str, spans: Iterable[Tuple[int, int]], max_length: int,
          length: Callable[[str], int], split: Callable[[str], List[str]]) -> List[str]:
    """Consecutive `spans` of `text` packed greedily into pieces of at most max_length; a span
    too long on its own goes to `split`."""
    pieces, start, end = [], None, None
    for a, b in spans:
        if start is not None and length(text[start:b].strip()) <= max_length:
            end = b
            continue
        if start is not None:
            pieces.append(text[start:end].strip())
        if length(text[a:b].strip()) <= max_length:
            start, end = a, b
        else:
            pieces.extend(split(text[a:b].strip()))
            start = None
    if start is not None:
        pieces.append(text[start:end].strip())
    return pieces
