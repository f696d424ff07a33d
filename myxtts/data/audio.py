"""Audio: decoding (libsndfile formats, ffmpeg ones), downmix, resampling, trimming, loudness,
log-mel.

Decoding runs on the host with soundfile (libsndfile: wav, flac, ogg/vorbis/opus, mp3, aiff, ...)
or, for the containers libsndfile cannot open (m4a/aac/mp4/webm, myxtts.data.metadata.
FFMPEG_EXTENSIONS), the ffmpeg program when it is installed; then soxr resampling through librosa.
tensorflow-io is never needed. The log-mel runs in TensorFlow (`LogMel`, a tf.function built on
tf.signal.frame and tf.signal.rfft) so it can execute on the data device, and matches

    librosa.feature.melspectrogram(y=y, sr=sr, n_fft=n_fft, hop_length=hop, win_length=win,
                                   window="hann", center=True, pad_mode="constant", power=1.0,
                                   n_mels=n_mels, fmin=fmin, fmax=fmax, htk=False, norm="slaney")

followed by log10(max(mel_floor, mel)), to about 1e-6 (windowing and FFT in float64, see
`_log_mel`; tf.signal.stft would window in float32). Power 1 (magnitude) is the
HiFi-GAN/Tacotron convention that data.mel_floor is defined for; "constant" (zero) padding is
librosa's default and makes a zero-padded batch give exactly the per-utterance frames.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import subprocess
import tempfile
from typing import Tuple

import librosa
import numpy as np
import soundfile as sf
import tensorflow as tf

from myxtts.data.metadata import FFMPEG_EXTENSIONS

SILENCE_PEAK = 1e-3  # -60 dBFS: a recording whose peak stays below this is silence


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


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float,
                   fmax: float) -> np.ndarray:
    """Slaney-scale, Slaney-normalised filters [n_fft//2+1, n_mels] (librosa's defaults).
    tf.signal.linear_to_mel_weight_matrix is HTK-scale and unnormalised, so it cannot match
    librosa; the matrix is built once here and becomes a constant of the graph."""
    return librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax,
                               htk=False, norm="slaney").T.astype(np.float32)


class LogMel:
    """Batched log10 mel spectrogram in a tf.function: [B, S] float32 audio → [B, 1 + S//hop,
    n_mels]. Call it under the device that should do the work (the data device).

    `xla_parts` = 0: a plain tf.function (what a SavedModel holds). `xla_parts` = k > 0: XLA
    fuses framing, the float64 window/FFT and the mel projection, and the batch's rows are split
    into k XLA launches that the executor runs concurrently (on a CPU data device k = its cores,
    so they all work on one batch; on a GPU, 1). A row's result is the same either way (to
    float32 rounding)."""

    def __init__(self, sample_rate: int, n_fft: int, hop_length: int, win_length: int,
                 n_mels: int, fmin: float, fmax: float, mel_floor: float, xla_parts: int = 0):
        self.n_fft, self.hop = n_fft, hop_length
        self.n_mels = n_mels
        self.mel_floor = mel_floor
        self.log_floor = math.log10(mel_floor)
        self._filters = mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)
        # librosa's window: periodic Hann of win_length, zero-padded to n_fft in the centre.
        self._window = librosa.util.pad_center(
            librosa.filters.get_window("hann", win_length, fftbins=True), size=n_fft)
        self.xla_parts = xla_parts
        if xla_parts:
            self._xla = tf.function(self._log_mel, jit_compile=True)
            self._compiled = tf.function(self._in_parts, reduce_retracing=True)
        else:
            self._compiled = tf.function(self._log_mel, reduce_retracing=True)

    @classmethod
    def from_config(cls, data_config, xla_parts: int = 0) -> "LogMel":
        d = data_config
        return cls(d.sample_rate, d.n_fft, d.hop_length, d.win_length, d.n_mels, d.fmin, d.fmax,
                   d.mel_floor, xla_parts)

    def __call__(self, audio: tf.Tensor) -> tf.Tensor:
        return self._compiled(audio)

    def _log_mel(self, audio: tf.Tensor) -> tf.Tensor:
        # Frames x window and the FFT run in float64, like librosa (numpy promotes float32 audio
        # times its float64 window): in float32 the rounding of loud frames leaks ~1e-7 of their
        # energy into quiet bins, which moves near-floor log10 mels by more than 1e-3.
        # Whatever changes these numbers must bump cache.FORMAT_VERSION: cached features are
        # keyed by the audio settings and that version, so they are then rebuilt.
        audio = tf.convert_to_tensor(audio, tf.float32)
        half = self.n_fft // 2
        frames = tf.signal.frame(tf.pad(audio, [[0, 0], [half, half]]), self.n_fft, self.hop)
        frames = frames[:, :1 + tf.shape(audio)[1] // self.hop]
        spectrum = tf.signal.rfft(tf.cast(frames, tf.float64) * tf.constant(self._window))
        magnitude = tf.cast(tf.abs(spectrum), tf.float32)
        mel = tf.tensordot(magnitude, tf.constant(self._filters), axes=1)
        return tf.math.log(tf.maximum(mel, self.mel_floor)) / math.log(10.0)

    def _in_parts(self, audio: tf.Tensor) -> tf.Tensor:
        audio = tf.convert_to_tensor(audio, tf.float32)
        size = -(-tf.shape(audio)[0] // self.xla_parts)  # the last parts may get no rows
        return tf.concat([self._xla(audio[i * size:(i + 1) * size])
                          for i in range(self.xla_parts)], 0)

    def masked(self, audio: tf.Tensor, lengths: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """Log-mels of a zero-padded batch, frames past each utterance set to log10(mel_floor);
        returns (mel, mel_lengths)."""
        mel = self(audio)
        mel_lengths = 1 + tf.cast(lengths, tf.int32) // self.hop
        mask = tf.sequence_mask(mel_lengths, tf.shape(mel)[1])[:, :, None]
        return tf.where(mask, mel, tf.cast(self.log_floor, mel.dtype)), mel_lengths


def librosa_log_mel(samples: np.ndarray, data_config, dtype=np.float32) -> np.ndarray:
    """The reference implementation [frames, n_mels] the tf.signal version must match."""
    d = data_config
    mel = librosa.feature.melspectrogram(
        y=samples.astype(dtype), sr=d.sample_rate, n_fft=d.n_fft, hop_length=d.hop_length,
        win_length=d.win_length, window="hann", center=True, pad_mode="constant", power=1.0,
        n_mels=d.n_mels, fmin=d.fmin, fmax=d.fmax, htk=False, norm="slaney")
    return np.log10(np.maximum(mel, d.mel_floor)).T


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
