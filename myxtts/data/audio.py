"""The log-mel features (decoding and the frame arithmetic: myxtts.data.audio_io, no TensorFlow).

The log-mel runs in TensorFlow (`LogMel`, a tf.function built on
static framing and tf.signal.rfft) so it can execute on the data device, and matches

    librosa.feature.melspectrogram(y=y, sr=sr, n_fft=n_fft, hop_length=hop, win_length=win,
                                   window="hann", center=True, pad_mode="constant", power=1.0,
                                   n_mels=n_mels, fmin=fmin, fmax=fmax, htk=False, norm="slaney")

followed by log10(max(mel_floor, mel)), to about 1e-6 (windowing and FFT in float64, see
`_log_mel`; tf.signal.stft would window in float32). Power 1 (magnitude) is the
HiFi-GAN/Tacotron convention that data.mel_floor is defined for; "constant" (zero) padding is
librosa's default and makes a zero-padded batch give exactly the per-utterance frames.
"""

from __future__ import annotations

import itertools
import math
import os
from typing import Tuple

import librosa
import numpy as np
import tensorflow as tf


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float,
                   fmax: float) -> np.ndarray:
    """Slaney-scale, Slaney-normalised filters [n_fft//2+1, n_mels] (librosa's defaults).
    tf.signal.linear_to_mel_weight_matrix is HTK-scale and unnormalised, so it cannot match
    librosa; the matrix is built once here and becomes a constant of the graph."""
    return librosa.filters.mel(sr=sample_rate, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax,
                               htk=False, norm="slaney").T.astype(np.float32)


def mel_bands(filters: np.ndarray, bands: int = 3):
    """The mel projection as `bands` dense blocks (first_bin, end_bin, weights [bins, mels]) over
    consecutive filters, cut where they multiply the fewest zero weights: a filter covers a few
    bins, so one dense [513, 80] product is mostly zeros (base settings: 29,760 products per
    frame; 3 blocks: 8,962, measured 5% faster for the whole featurizer on the CI machine)."""
    nonzero = filters != 0
    first = nonzero.argmax(axis=0)
    end = filters.shape[0] - nonzero[::-1].argmax(axis=0)
    mels = filters.shape[1]

    def cost(cuts):
        return sum((end[b - 1] - first[a]) * (b - a) for a, b in zip(cuts[:-1], cuts[1:]))

    inner = min(itertools.combinations(range(1, mels), min(bands, mels) - 1),
                key=lambda c: cost((0,) + c + (mels,)))
    cuts = (0,) + inner + (mels,)
    return [(int(first[a]), int(end[b - 1]), filters[first[a]:end[b - 1], a:b])
            for a, b in zip(cuts[:-1], cuts[1:])]


# Frames per loop step of the CPU featurizer: 24 frames' float64 samples and spectra (~390 KB at
# n_fft 1024) fit a core's L2 cache. On the 2-core CI machine 12 to 28 measured alike, 32 and
# more ran 1.3x slower, 8 and fewer lost to per-step overhead.
CPU_CHUNK_FRAMES = 24


class LogMel:
    """Batched log10 mel spectrogram in a tf.function: [B, S] float32 audio → [B, 1 + S//hop,
    n_mels]. Call it under the device that should do the work (the data device).

    The rows are laid end to end, each zero-padded to a whole number of hops with at least
    n_fft/2 zeros either side, so the centred frames of every row are frames of one flat signal
    (a few frames per row straddle two rows and are dropped). How that signal's frames are
    computed:

    - `xla_parts` = 0: in one plain tf.function (what a SavedModel holds; differentiable, the
      vocoder's mel loss goes through it).
    - `xla_parts` = k > 0: XLA fuses framing, the float64 window/FFT and the mel projection, and
      the frames are split into k launches that the executor runs concurrently (a GPU: 1; a CPU:
      its cores).
    - `chunk_frames` = c > 0 (CPU): each launch loops over its frames c at a time, so a chunk's
      float64 frames and spectrum stay in the core's cache instead of streaming the whole
      batch's (8 KB per frame each at n_fft 1024) through memory: about 2.2x the one-launch
      layout on the 2-core CI machine (benchmarks/bench_mel.py).

    A frame's result is the same either way (to float32 rounding)."""

    def __init__(self, sample_rate: int, n_fft: int, hop_length: int, win_length: int,
                 n_mels: int, fmin: float, fmax: float, mel_floor: float, xla_parts: int = 0,
                 chunk_frames: int = 0):
        self.n_fft, self.hop = n_fft, hop_length
        self.n_mels = n_mels
        self.mel_floor = mel_floor
        self.log_floor = math.log10(mel_floor)
        filters = mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)
        # Bins above fmax have no weight in any filter: their magnitudes are not computed.
        self._bins = int(np.flatnonzero(filters.any(axis=1)).max()) + 1
        self._bands = mel_bands(filters[:self._bins])
        # librosa's window: periodic Hann of win_length, zero-padded to n_fft in the centre.
        self.window = librosa.util.pad_center(
            librosa.filters.get_window("hann", win_length, fftbins=True), size=n_fft)
        self.xla_parts = xla_parts
        self.chunk_frames = chunk_frames
        self._frames_fn = (tf.function(self._part_log_mel, jit_compile=True) if xla_parts
                           else self._part_log_mel)
        self._compiled = tf.function(self._log_mel, reduce_retracing=True)

    @classmethod
    def from_config(cls, data_config, xla_parts: int = 0, chunk_frames: int = 0) -> "LogMel":
        d = data_config
        return cls(d.sample_rate, d.n_fft, d.hop_length, d.win_length, d.n_mels, d.fmin, d.fmax,
                   d.mel_floor, xla_parts, chunk_frames)

    @classmethod
    def for_device(cls, data_config, device_type: str) -> "LogMel":
        """XLA-compiled as suits the device that runs it: on a GPU one launch over the whole
        batch; on a CPU one launch per core, each looping over CPU_CHUNK_FRAMES frames at a
        time."""
        if device_type.upper() == "CPU":
            return cls.from_config(data_config, xla_parts=os.cpu_count() or 1,
                                   chunk_frames=CPU_CHUNK_FRAMES)
        return cls.from_config(data_config, xla_parts=1)

    def __call__(self, audio: tf.Tensor) -> tf.Tensor:
        return self._compiled(audio)

    def _log_mel(self, audio: tf.Tensor) -> tf.Tensor:
        audio = tf.convert_to_tensor(audio, tf.float32)
        rows, width = tf.shape(audio)[0], tf.shape(audio)[1]
        half = self.n_fft // 2
        stride = (width + self.n_fft + self.hop - 1) // self.hop * self.hop
        row_frames = stride // self.hop
        total = rows * row_frames
        parts = max(self.xla_parts, 1)
        # Frames per launch: a whole number of chunks, the same for every launch (one compile).
        step = max(self.chunk_frames, 1)
        size = tf.maximum(-(-total // parts // step) * step, step)
        span = self._span(size)  # samples under a launch's frames
        # One copy: zero rows after the batch cover the last launch's span.
        extra_rows = -(-((parts - 1) * size * self.hop + span - rows * stride) // stride)
        flat = tf.reshape(tf.pad(audio, [[0, extra_rows], [half, stride - width - half]]), [-1])
        mel = tf.concat([self._frames_fn(flat[i * size * self.hop:i * size * self.hop + span])
                         for i in range(parts)], 0)
        mel = tf.reshape(mel[:total], [rows, row_frames, self.n_mels])
        return mel[:, :1 + width // self.hop]

    def _span(self, frames):
        """Samples _frames reads for `frames` frames: whole hops, n_fft - hop or more past the
        last frame's start."""
        return (frames - 1 + -(-self.n_fft // self.hop)) * self.hop

    def _frames(self, signal: tf.Tensor, count) -> tf.Tensor:
        """The first `count` frames [count, n_fft] of a signal of _span(count) samples: each
        frame is the next ceil(n_fft / hop) hop-long blocks side by side, cut to n_fft (static
        slices and a concat, which XLA copies faster than tf.signal.frame's gather)."""
        blocks = tf.reshape(signal, [-1, self.hop])
        return tf.concat([blocks[j:j + count] for j in range(-(-self.n_fft // self.hop))],
                         1)[:, :self.n_fft]

    def _part_log_mel(self, signal: tf.Tensor) -> tf.Tensor:
        """Log-mels [F, n_mels] of the frames of a launch's _span(F) samples."""
        count = tf.shape(signal)[0] // self.hop - self._span(1) // self.hop + 1
        if not self.chunk_frames:
            return self._frames_log_mel(self._frames(signal, count))
        chunk = self.chunk_frames

        def body(i, out):
            samples = tf.slice(signal, [i * chunk * self.hop], [self._span(chunk)])
            return i + 1, out.write(i, self._frames_log_mel(self._frames(samples, chunk)))

        out = tf.TensorArray(tf.float32, size=count // chunk, element_shape=[chunk, self.n_mels])
        _, out = tf.while_loop(lambda i, _: i < count // chunk, body, [0, out],
                               parallel_iterations=1)
        return tf.reshape(out.stack(), [-1, self.n_mels])

    def _frames_log_mel(self, frames: tf.Tensor) -> tf.Tensor:
        # Frames x window and the FFT run in float64, like librosa (numpy promotes float32 audio
        # times its float64 window): in float32 the rounding of loud frames leaks ~1e-7 of their
        # energy into quiet bins, which moves near-floor log10 mels by more than 1e-3.
        # Whatever changes these numbers must bump cache.FORMAT_VERSION: cached features are
        # keyed by the audio settings and that version, so they are then rebuilt.
        spectrum = tf.signal.rfft(tf.cast(frames, tf.float64) * tf.constant(self.window))
        magnitude = tf.cast(tf.abs(spectrum[:, :self._bins]), tf.float32)
        mel = tf.concat([tf.matmul(magnitude[:, first:end], tf.constant(weights))
                         for first, end, weights in self._bands], 1)
        return tf.math.log(tf.maximum(mel, self.mel_floor)) / math.log(10.0)

    def masked(self, audio: tf.Tensor, lengths: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """Log-mels of a zero-padded batch, frames past each utterance set to log10(mel_floor);
        returns (mel, mel_lengths)."""
        mel = self(audio)
        mel_lengths = 1 + tf.cast(lengths, tf.int32) // self.hop
        mask = tf.sequence_mask(mel_lengths, tf.shape(mel)[1])[:, :, None]
        return tf.where(mask, mel, tf.cast(self.log_floor, mel.dtype)), mel_lengths
