"""The speaker judge of `myxtts-evaluate`: an independent pretrained speaker encoder, never used
in training, that says whose voice a waveform has.

Resemblyzer (PyPI `resemblyzer`) ships the weights of its GE2E speaker encoder inside its wheel,
so it runs offline; it needs torch. Both are optional (docs/evaluation.md, "Speaker similarity",
says how to install them with a CPU-only torch): `load_speaker_judge` returns None and the reason
when they cannot be imported, and the report says speaker similarity was not measured.
"""

from __future__ import annotations

import importlib.metadata
import warnings
from typing import Dict, List, Optional, Tuple

import librosa
import numpy as np

from myxtts.errors import MyXTTSError

JUDGE_RATE = 16000
JUDGE_DBFS = -30.0  # the level Resemblyzer normalises quieter audio to (its audio_norm_target_dBFS)
INSTALL_HINT = ("pip install torch --index-url https://download.pytorch.org/whl/cpu && "
                "pip install webrtcvad-wheels && pip install --no-deps resemblyzer")


class SpeakerJudgeUnavailableError(MyXTTSError, RuntimeError):
    """The speaker judge was asked for but cannot run."""


class ResemblyzerJudge:
    """embed(samples float32 [S], sample_rate) -> float64 [256], length 1. Sets the process's
    torch to one thread."""

    def __init__(self):
        # pylint: disable=import-outside-toplevel  (optional: torch and resemblyzer)
        with warnings.catch_warnings():  # its scipy.ndimage.morphology import is deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            from resemblyzer import VoiceEncoder, preprocess_wav
        import torch
        # One thread: the encoder is small (3 LSTM layers of 256) and more threads fight
        # TensorFlow's for the cores. On 2 loaded cores one thread embedded 3 s utterances in
        # 0.07-0.12 s each, two threads in 0.3-3.6 s.
        torch.set_num_threads(1)
        self._encoder = VoiceEncoder("cpu", verbose=False)
        self._preprocess = preprocess_wav
        self.name = (f"resemblyzer {importlib.metadata.version('resemblyzer')} (GE2E speaker "
                     f"encoder, the weights its package ships)")

    def embed(self, samples, sample_rate: int) -> np.ndarray:
        """The speaker embedding of a waveform: resampled to 16 kHz, brought to JUDGE_DBFS
        (up or down: the encoder's log-mel input, and so its embedding, moves with the level,
        which is not the voice), then Resemblyzer's own preparation (long silences cut down to
        about 0.2 s by its voice-activity detector, webrtcvad). Silence, or audio in which the
        detector hears no voice, is embedded as it is."""
        wav = np.asarray(samples, np.float32)
        if sample_rate != JUDGE_RATE and wav.size:
            wav = librosa.resample(wav, orig_sr=sample_rate, target_sr=JUDGE_RATE,
                                   res_type="soxr_hq")
        if np.any(wav):
            rms = float(np.sqrt(np.mean(np.square(wav, dtype=np.float64))))
            wav = (wav * (10 ** (JUDGE_DBFS / 20) / rms)).astype(np.float32)
            prepared = self._preprocess(wav)
            if prepared.size:
                wav = prepared
        return np.asarray(self._encoder.embed_utterance(wav), np.float64)


def load_speaker_judge(choice: str) -> Tuple[Optional[ResemblyzerJudge], str]:
    """(judge, "") or (None, why speaker similarity is not measured).

    choice: "auto" (Resemblyzer when it can be imported), "resemblyzer" (the same, but a
    problem is a SpeakerJudgeUnavailableError) or "none"."""
    if choice == "none":
        return None, "not asked for"
    try:
        return ResemblyzerJudge(), ""
    except ImportError as e:
        missing = getattr(e, "name", None)
        problem = (f"{missing} is not installed" if missing in ("resemblyzer", "torch")
                   else f"resemblyzer cannot be imported ({e})")
        problem += f"; install the judge with: {INSTALL_HINT}"
    except (RuntimeError, OSError, ValueError) as e:
        problem = f"resemblyzer could not load its speaker encoder: {e}"
    if choice == "resemblyzer":
        raise SpeakerJudgeUnavailableError(
            f"The speaker judge resemblyzer was asked for but cannot run: {problem}.")
    return None, problem


class HeardRecordings:
    """What the judge heard of the real recordings during one evaluation, each recording once
    (by its clip): `embeddings` and their `speakers`, in the order first heard; `embed` also
    hears synthesised audio. All audio at `sample_rate`."""

    def __init__(self, judge: ResemblyzerJudge, sample_rate: int):
        self.judge, self.sample_rate = judge, sample_rate
        self.embeddings: List[np.ndarray] = []
        self.speakers: List[str] = []
        self._index: Dict[Tuple[str, int], int] = {}

    def index(self, item, samples) -> int:
        """The index of recording `item` (a myxtts.data.validation.Item) with its decoded
        `samples`, embedded the first time it is seen."""
        if item.clip not in self._index:
            self._index[item.clip] = len(self.embeddings)
            self.embeddings.append(self.embed(samples))
            self.speakers.append(item.speaker)
        return self._index[item.clip]

    def embed(self, samples) -> np.ndarray:
        return self.judge.embed(samples, self.sample_rate)
