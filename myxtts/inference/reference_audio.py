"""A speaker reference recording → the samples the speaker encoder reads, without TensorFlow:
decoded and resampled like training data (silence trimmed when data.trim_silence), loudness
normalised when data.normalize_loudness, cut to the first data.ref_max_seconds. The Synthesizer
and the speech server (myxtts.serving) prepare references with it, so a voice made by either
from the same recording has the same latents.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import soundfile as sf

from myxtts.config import DataConfig
from myxtts.data import audio_io, audio_math
from myxtts.errors import MyXTTSError


class ReferenceAudioError(MyXTTSError, ValueError):
    """A speaker reference that cannot be read, holds no audio or is too short."""


class ReferenceTooShortError(ReferenceAudioError):
    """A speaker reference with less sound than data.ref_min_seconds."""


def reference_sample_count(data: DataConfig) -> int:
    """The most samples of a reference the model reads (audio_math.reference_sample_count)."""
    return audio_math.reference_sample_count(data.sample_rate, data.hop_length,
                                             data.ref_max_seconds)


def load_reference(path: str, data: DataConfig, name: Optional[str] = None,
                   whole: bool = False) -> np.ndarray:
    """Float32 samples of the reference recording `path` (named `name` in messages, default
    the path), prepared like training data and cut to reference_sample_count (`whole`: not
    cut). A recording with less sound (after trimming) than data.ref_min_seconds, the
    shortest reference the model trained on, is refused: the one rule of the synthesizer, the
    Python API and the speech server."""
    name = name or path
    try:
        samples = audio_io.decode(path, data.sample_rate, data.trim_silence,
                                  data.trim_top_db).samples
    except (OSError, RuntimeError, ValueError, sf.LibsndfileError) as e:
        problem = str(e).replace(path, name).rstrip(".")
        raise ReferenceAudioError(
            f"Cannot read the reference audio {name}: {problem}. Pass a readable recording of "
            f"the target speaker (wav, flac, ogg, mp3 or any format libsndfile reads; "
            f"m4a/aac/mp4/webm with ffmpeg installed).") from None
    problem = audio_math.reference_problem(samples, data.sample_rate, name, data.trim_silence,
                                           data.ref_min_seconds, data.ref_max_seconds)
    if problem is not None:
        kind, message = problem
        raise (ReferenceTooShortError if kind == "too_short" else ReferenceAudioError)(message)
    if data.normalize_loudness:
        samples = audio_math.normalize_loudness(samples, data.target_rms_db)
    return samples if whole else samples[: reference_sample_count(data)]
