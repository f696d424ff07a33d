"""The text front end of synthesis, without TensorFlow: a text and a language code → the token
ids the model reads (cleaned, phonemized, checked against the saved vocabulary and the model's
text length) and the length cap of their decode. Used by the Synthesizer, and by anything that
must prepare text without TensorFlow (a server, an on-device runtime).
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np

from myxtts.config import ModelConfig
from myxtts.data import text as text_lib
from myxtts.errors import MyXTTSError
from myxtts.inference.sentences import split_sentences


class UnknownLanguageError(MyXTTSError, ValueError):
    """A language the model was not trained with."""


class UnknownCharactersError(MyXTTSError, ValueError):
    """Text characters (after cleaning) that are not in the saved vocabulary."""


MIN_SENTENCE_TOKENS = 40  # a few words


def sentence_token_budget(max_text_positions: int, max_decoder_steps: int,
                          reduction_factor: int, max_frames_per_token: float) -> int:
    """The most tokens one decoded piece of a text gets: the model's max_text_positions, and no
    more than the length cap (max_decoder_steps * r frames) holds at half the
    max_frames_per_token frames per token (speech runs at 40-50% of that cap), so a piece ends
    by its stop head, not by the cap; but at least MIN_SENTENCE_TOKENS: under a cap that short
    (a --max-decoder-steps chosen to cut decodes short) words are not cut into letters."""
    by_cap = int(max_decoder_steps * reduction_factor / (max_frames_per_token / 2))
    return min(max_text_positions, max(MIN_SENTENCE_TOKENS, by_cap))


class TextFrontEnd:
    """`tokenizer` (the run's vocab.json), the run's `languages` and its model config."""

    def __init__(self, tokenizer: text_lib.Tokenizer, languages: Sequence[str],
                 model_config: ModelConfig, max_decoder_steps: int):
        self.tokenizer = tokenizer
        self.languages = list(languages)
        self.model_config = model_config
        self.max_decoder_steps = int(max_decoder_steps)
        self._phonemizer = text_lib.Phonemizer() if tokenizer.use_phonemes else None

    def language_id(self, language: str) -> int:
        index = text_lib.language_id(language, self.languages)
        if index is None:
            raise UnknownLanguageError(
                f"Unknown language {language!r}: this model was trained with "
                f"{', '.join(self.languages)} (data.languages in its config.yaml).")
        return index

    @property
    def max_sentence_tokens(self) -> int:
        """The most tokens `sentences` puts in one piece (sentence_token_budget)."""
        m = self.model_config
        return sentence_token_budget(m.max_text_positions, self.max_decoder_steps,
                                     m.reduction_factor, m.max_frames_per_token)

    def sentences(self, text: str, language: str) -> List[List[int]]:
        """Token ids of each sentence of `text` (myxtts.inference.sentences), a sentence
        longer than max_sentence_tokens cut at clauses or words; all errors are raised before
        any is returned."""
        self.language_id(language)
        pieces = split_sentences(text, language, self.max_sentence_tokens,
                                 length=lambda piece: self._token_count(piece, language))
        if not pieces:
            raise UnknownCharactersError(f"The text {text!r} is empty.")
        return [self.encode(piece, language) for piece in pieces]

    def _token_count(self, text: str, language: str) -> int:
        cleaned = text_lib.clean_text(text, self.tokenizer.cleaner, language)
        if self._phonemizer is not None:
            cleaned = self._phonemizer([cleaned], language)[0]
        return len(cleaned)

    def encode(self, text: str, language: str) -> List[int]:
        """Token ids of `text`, cleaned (and phonemized) as in training; raises
        UnknownCharactersError instead of dropping characters the vocabulary lacks."""
        self.language_id(language)
        cleaned = text_lib.clean_text(text, self.tokenizer.cleaner, language)
        if self._phonemizer is not None:
            cleaned = self._phonemizer([cleaned], language)[0]
        unknown = self.tokenizer.unknown_characters(cleaned)
        if unknown:
            raise UnknownCharactersError(
                f"The text {text!r} has characters outside the model's saved vocabulary "
                f"(after the {self.tokenizer.cleaner!r} cleaner): "
                f"{' '.join(repr(c) for c in unknown)}. The model never saw them in training; "
                f"rewrite or remove them (the vocabulary is "
                f"{''.join(self.tokenizer.symbols[1:])!r}).")
        ids = self.tokenizer.encode(cleaned)
        if not ids:
            raise UnknownCharactersError(f"The text {text!r} is empty after cleaning.")
        limit = self.model_config.max_text_positions
        if len(ids) > limit:
            raise UnknownCharactersError(
                f"The text {text[:40]!r}... has {len(ids)} tokens, more than the model's "
                f"{limit} (model.max_text_positions); split it into sentences, one text "
                f"each.")
        return ids

    def max_frames(self, num_tokens: int) -> int:
        """The length cap of a decode (XTTSModel.decode): ceil(tokens * max_frames_per_token
        / r) steps, at most max_decoder_steps, times r frames."""
        r = self.model_config.reduction_factor
        steps = np.ceil(np.float32(num_tokens) * np.float32(self.model_config.max_frames_per_token)
                        / np.float32(r))
        return int(np.clip(steps, 1, self.max_decoder_steps)) * r
