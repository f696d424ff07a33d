"""Audio on the host, without TensorFlow: decoding (libsndfile formats, ffmpeg ones), downmix,
resampling, trimming, loudness, and the frame arithmetic of the log-mel (myxtts.data.audio).

Decoding runs with soundfile (libsndfile: wav, flac, ogg/vorbis/opus, mp3, aiff, ...) or, for the
containers libsndfile cannot open (m4a/aac/mp4/webm, myxtts.data.metadata.FFMPEG_EXTENSIONS),
the ffmpeg program when it is installed; then soxr resampling through librosa. tensorflow-io is
never needed. This module imports no TensorFlow, so a TensorFlow-free runtime can use it.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from typing import Tuple

import librosa
import numpy as np
import soundfile as sf

from myxtts.data.metadata import FFMPEG_EXTENSIONS



class FFmpegMissingError(RuntimeError):
    """A file only ffmpeg decodes, and ffmpeg is not installed."""


@dataclasses.dataclass(frozen=True)
class DecodedAudio:
    """Mono float32 samples at the target rate plus what was done to get there."""

    samples: np.ndarray
    source_rate: int
    source_channels: int


def decode(path: str, sample_rate: int, trim_silence: bool = False, trim_top_db: float = 40.0,
           ) -> DecodedAudio:
    """Reads `path` (any soundfile format, or an ffmpeg one), downmixes to mono, resamples to
    `sample_rate` and optionally trims leading/trailing silence. Raises soundfile/OS errors for
    unreadable files, FFmpegMissingError for ffmpeg formats without ffmpeg."""
    if os.path.splitext(path)[1].lower() in FFMPEG_EXTENSIONS:
        data, rate = _read_with_ffmpeg(path)
    else:
        data, rate = sf.read(path, dtype="float32", always_2d=True)
    channels = data.shape[1]
    samples = data.mean(axis=1) if channels > 1 else data[:, 0]
    if rate != sample_rate and samples.size:
        samples = librosa.resample(samples, orig_sr=rate, target_sr=sample_rate,
                                   res_type="soxr_hq")
    if trim_silence and samples.size and np.all(np.isfinite(samples)):
        samples, _ = librosa.effects.trim(samples, top_db=trim_top_db)
    return DecodedAudio(np.ascontiguousarray(samples, dtype=np.float32), rate, channels)


def _read_with_ffmpeg(path: str) -> Tuple[np.ndarray, int]:
    """(samples [n, channels] float32, rate) of a file libsndfile cannot open, through ffmpeg
    (the audio stream as 32-bit float WAV at its own rate and channels, so resampling and
    downmixing are the same as for every other format)."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise FFmpegMissingError(
            f"{os.path.splitext(path)[1]} files need ffmpeg, which is not installed: install it "
            f"(apt-get install ffmpeg, brew install ffmpeg or conda install ffmpeg) or convert "
            f"them to WAV or FLAC.")
    with tempfile.TemporaryDirectory() as tmp:
        wav = os.path.join(tmp, "decoded.wav")
        result = subprocess.run([ffmpeg, "-nostdin", "-v", "error", "-i", path, "-vn",
                                 "-acodec", "pcm_f32le", "-f", "wav", wav],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"ffmpeg cannot decode it: "
                               f"{' '.join(result.stderr.split())[:200] or 'no audio stream'}")
        return sf.read(wav, dtype="float32", always_2d=True)


def reference_slice(num_samples: int, sample_rate: int, min_seconds: float, max_seconds: float,
                    rng: np.random.Generator) -> Tuple[int, int]:
    """(start, length) of a random slice between min and max seconds long (the whole utterance
    when it is shorter than min_seconds)."""
    lo, hi = int(min_seconds * sample_rate), int(max_seconds * sample_rate)
    if num_samples <= lo:
        return 0, num_samples
    length = int(rng.integers(lo, min(hi, num_samples) + 1))
    start = int(rng.integers(0, num_samples - length + 1))
    return start, length
