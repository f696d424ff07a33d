"""More training voices from the ones a corpus has: `data.voice_shifts`.

Each factor f adds a copy of every training speaker whose recordings are resampled as if played
f times faster: pitch, formants and tempo all scale by f, which is a different voice (a
"speed perturbation" of the speaker, not of the text). The copy is a speaker of its own,
`<speaker>~<f>`, whose references are its own shifted recordings, so the model learns to take
the voice from the reference over many more voices than the corpus holds. Validation rows are
never shifted. A shifted copy that would be longer than data.max_audio_seconds is left out.

This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence

import numpy as np
import soxr

from myxtts.data.validation import Item


def shifted_length(num_samples: int, factor: float) -> int:
    return max(1, int(round(num_samples / factor)))


def shift_voice(samples: np.ndarray, factor: float, length: int) -> np.ndarray:
    """`samples` played `factor` times faster at the same rate, cut or padded to `length`
    samples: float32 [length]."""
    out = soxr.resample(np.asarray(samples, np.float32), factor, 1.0, quality="HQ")
    return np.pad(out[:length], (0, max(0, length - len(out)))).astype(np.float32)


def shifted_speaker(speaker: str, factor: float) -> str:
    return f"{speaker}~{factor:g}"


def shifted_items(items: Sequence[Item], factors: Sequence[float], data_config) -> List[Item]:
    """The voice-shifted copies of `items` (training items), one per item and factor that fits
    data.max_audio_seconds."""
    limit = data_config.max_audio_seconds * data_config.sample_rate
    out = []
    for factor in factors:
        for item in items:
            length = shifted_length(item.num_samples, factor)
            if length <= limit:
                out.append(dataclasses.replace(
                    item, id=f"{item.id}~{factor:g}", speaker=shifted_speaker(item.speaker, factor),
                    num_samples=length, voice_shift=float(factor)))
    return out
