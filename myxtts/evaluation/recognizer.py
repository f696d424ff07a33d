"""An optional offline speech recogniser for the word error rate of `myxtts-evaluate`.

pocketsphinx (PyPI `pocketsphinx`, the `eval` extra: pip install 'myxtts[eval]') runs offline
with the US-English acoustic model, language model and dictionary it ships. It is never
required: `load_recognizer` returns None and the reason (not installed, not asked for, or a
model whose sentences are not English) and the report says WER was not measured and why.
"""

from __future__ import annotations

import importlib.metadata
from typing import Optional, Sequence, Tuple

import librosa
import numpy as np

from myxtts.errors import MyXTTSError

RECOGNIZER_RATE = 16000
ENGLISH = ("en", "en-us", "en_us", "en-gb", "en_gb")


class RecognizerUnavailableError(MyXTTSError, RuntimeError):
    """The recogniser pocketsphinx was asked for but cannot run."""


class PocketSphinx:
    """transcribe(samples float32 [S], sample_rate) -> lower-case words (str)."""

    def __init__(self):
        import pocketsphinx  # pylint: disable=import-outside-toplevel
        self._decoder = pocketsphinx.Decoder(samprate=RECOGNIZER_RATE, loglevel="FATAL")
        self.name = f"pocketsphinx {importlib.metadata.version('pocketsphinx')} (its en-us model)"

    def transcribe(self, samples, sample_rate: int) -> str:
        samples = np.asarray(samples, np.float32)
        if sample_rate != RECOGNIZER_RATE and samples.size:
            samples = librosa.resample(samples, orig_sr=sample_rate, target_sr=RECOGNIZER_RATE,
                                       res_type="soxr_hq")
        pcm = np.round(np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2")
        self._decoder.start_utt()
        self._decoder.process_raw(pcm.tobytes(), full_utt=True)
        self._decoder.end_utt()
        hypothesis = self._decoder.hyp()
        return hypothesis.hypstr if hypothesis is not None else ""


def load_recognizer(choice: str, languages: Sequence[str]) -> Tuple[Optional[PocketSphinx], str]:
    """(recogniser, "") or (None, why WER is not measured).

    choice: "auto" (pocketsphinx when installed and every sentence is English), "pocketsphinx"
    (the same, but a problem is a RecognizerUnavailableError) or "none"."""
    if choice == "none":
        return None, "not asked for"
    foreign = sorted({lang for lang in languages if lang.lower() not in ENGLISH})
    problem = None
    if foreign:
        problem = (f"the offline recogniser (pocketsphinx) only has an English model and the "
                   f"evaluated sentences are in {', '.join(foreign)}")
    else:
        try:
            return PocketSphinx(), ""
        except ImportError:
            problem = ("pocketsphinx is not installed (pip install 'myxtts[eval]' or "
                       "pip install pocketsphinx)")
        except (RuntimeError, OSError, ValueError) as e:
            problem = f"pocketsphinx could not start: {e}"
    if choice == "pocketsphinx":
        raise RecognizerUnavailableError(
            f"The recogniser pocketsphinx was asked for but cannot run: {problem}.")
    return None, problem
