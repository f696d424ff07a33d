"""Audio arithmetic without librosa or TensorFlow: the silence floor, loudness normalisation and
the frame counts of the centred log-mel, and the one rule for a usable speaker reference.
myxtts.data.audio_io (the host's audio I/O), myxtts.inference.reference_audio and the on-device
runtime's features (myxtts.lite.features) share it."""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

SILENCE_PEAK = 1e-3  # -60 dBFS: a recording whose peak stays below this is silence


def normalize_loudness(samples: np.ndarray, target_rms_db: float) -> np.ndarray:
    """Scales to the target RMS level (dBFS), then limits the peak to 0.99 to avoid clipping."""
    rms = float(np.sqrt(np.mean(np.square(samples), dtype=np.float64))) if samples.size else 0.0
    if rms <= 0.0:
        return samples
    scaled = samples * (10.0 ** (target_rms_db / 20.0) / rms)
    peak = float(np.max(np.abs(scaled)))
    if peak > 0.99:
        scaled *= 0.99 / peak
    return scaled.astype(np.float32)


def num_frames(num_samples: int, hop_length: int) -> int:
    """Mel frames of a centred STFT (librosa center=True): 1 + samples // hop."""
    return 1 + num_samples // hop_length


def samples_for_frames(frames: int, hop_length: int) -> int:
    """Largest sample count that gives exactly `frames` centred frames."""
    return frames * hop_length - 1


def reference_sample_count(sample_rate: int, hop_length: int, ref_max_seconds: float) -> int:
    """The most samples of a speaker reference the model reads: those whose centred frames are
    the frames of ref_max_seconds."""
    return samples_for_frames(num_frames(int(ref_max_seconds * sample_rate), hop_length),
                              hop_length)


def reference_problem(samples: np.ndarray, sample_rate: int, name: str, trimmed: bool,
                      ref_min_seconds: float, ref_max_seconds: float
                      ) -> Optional[Tuple[str, str]]:
    """None when the prepared (decoded, resampled, trimmed when `trimmed`) reference `samples`
    can make a voice, else (kind, message): kind "no_sound" (empty, silent or not finite) or
    "too_short" (less sound than ref_min_seconds, the shortest reference the model trained
    on). The synthesizer, the Python APIs, the speech server and the on-device runtime all
    refuse by this rule, with this message."""
    what_to_pass = (f"Pass a recording of the target speaker with at least {ref_min_seconds:g} s "
                    f"of speech (the first {ref_max_seconds:g} s are used).")
    if samples.size == 0 or not np.all(np.isfinite(samples)) or \
            float(np.max(np.abs(samples))) < SILENCE_PEAK:
        return "no_sound", (f"The reference audio {name} holds no usable samples (empty, silent "
                            f"or not finite). {what_to_pass}")
    seconds = samples.size / sample_rate
    if seconds < ref_min_seconds:
        return "too_short", (
            f"The reference audio {name} holds {seconds:.2f} s of sound"
            f"{' after silence trimming' if trimmed else ''}, less than the "
            f"{ref_min_seconds:g} s this model's voices are made from (data.ref_min_seconds). "
            f"{what_to_pass}")
    return None
