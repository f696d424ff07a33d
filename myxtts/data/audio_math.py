"""Audio arithmetic without librosa or TensorFlow: the silence floor, loudness normalisation and
the frame counts of the centred log-mel. myxtts.data.audio_io (the host's audio I/O) and the
on-device runtime's features (myxtts.lite.features) share it."""

from __future__ import annotations

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
