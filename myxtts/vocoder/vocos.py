"""Frame-rate generator with an inverse-STFT output (Vocos, Siuzdak 2023): log10 mel
[B, T, n_mels] → waveform [B, T * hop].

    generator = VocosGenerator.from_config(config)   # weights built here (device scope!)
    audio = generator(mel)                           # float32 [B, T * hop_length]

A 7-wide input convolution and `vocoder.vocos_layers` ConvNeXt blocks (depthwise 7-wide
convolution, LayerNorm, pointwise 3x expansion with GELU, pointwise projection, learned
per-channel layer scale, residual) run at the mel frame rate; a linear head predicts, per frame,
the log-magnitude and the phase of every bin of a data.n_fft-point STFT. The waveform is their
inverse STFT: each frame's inverse FFT times a Hann window of data.win_length, overlap-added
every hop_length samples and divided by the summed squared windows (an exact inverse of the
featurizer's STFT wherever frames overlap enough; see `_envelope_floor`).
Frame i is centred on sample i * hop, like the featurizer's centred STFT, so T frames give
exactly T * hop samples.

All convolutions run T times per second of audio instead of up to 16000 (HiFi-GAN's last
stages), and the harmonics of the voice are STFT bins the head sets directly rather than a
periodic signal the upsampling stack has to learn to make: the generator of the CPU recipe
(docs/vocoder.md). Trained with the same discriminators and losses as HiFi-GAN.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from myxtts.models.layers import in_static_context, indexed

# Vocos clips the predicted magnitude at 1e2 (exp of the log-magnitude) against overflow.
MAX_LOG_MAGNITUDE = math.log(1e2)


def _init():
    return keras.initializers.TruncatedNormal(stddev=0.02)


class ConvNeXtBlock(keras.layers.Layer):
    def __init__(self, channels: int, layer_scale: float, **kwargs):
        super().__init__(**kwargs)
        self.channels, self.layer_scale = channels, layer_scale
        self.depthwise = keras.layers.DepthwiseConv1D(7, padding="same",
                                                      depthwise_initializer=_init(),
                                                      name="depthwise")
        self.norm = keras.layers.LayerNormalization(epsilon=1e-6, name="norm")
        self.expand = keras.layers.Dense(3 * channels, activation="gelu",
                                         kernel_initializer=_init(), name="expand")
        self.project = keras.layers.Dense(channels, kernel_initializer=_init(), name="project")

    def build(self, input_shape=None):
        self.depthwise.build((None, None, self.channels))
        self.norm.build((None, None, self.channels))
        self.expand.build((None, None, self.channels))
        self.project.build((None, None, 3 * self.channels))
        self.scale = self.add_weight(shape=(self.channels,), name="layer_scale",
                                     initializer=keras.initializers.Constant(self.layer_scale))
        self.built = True

    def call(self, x):
        y = self.project(self.expand(self.norm(self.depthwise(x))))
        return x + tf.cast(self.scale, y.dtype) * y


class VocosGenerator(keras.Model):
    vocoder_name = "Vocos"  # in logs: "Vocoder: Vocos ..."

    def __init__(self, n_mels: int, n_fft: int, hop_length: int, win_length: int,
                 channels: int = 192, layers: int = 6, **kwargs):
        kwargs.setdefault("name", "vocos_generator")
        super().__init__(**kwargs)
        if n_fft < 2 * hop_length or win_length > n_fft:
            raise ValueError(f"the inverse STFT needs n_fft >= 2 * hop_length and win_length <= "
                             f"n_fft (got n_fft {n_fft}, hop {hop_length}, win {win_length})")
        self.n_mels, self.n_fft = n_mels, n_fft
        self.hop_length, self.win_length = hop_length, win_length
        self.conv_pre = keras.layers.Conv1D(channels, 7, padding="same",
                                            kernel_initializer=_init(), name="conv_pre")
        self.norm_pre = keras.layers.LayerNormalization(epsilon=1e-6, name="norm_pre")
        self.blocks = indexed(self, "block", [
            ConvNeXtBlock(channels, 1.0 / layers, name=f"block_{i}") for i in range(layers)])
        self.norm_post = keras.layers.LayerNormalization(epsilon=1e-6, name="norm_post")
        # float32 under mixed precision: magnitudes are exponentiated, phases fed to cos/sin.
        self.head = keras.layers.Dense(n_fft + 2, dtype="float32", kernel_initializer=_init(),
                                       name="head")
        window = np.hanning(win_length + 1)[:-1]  # periodic Hann
        pad = (n_fft - win_length) // 2
        window = np.pad(window, [pad, n_fft - win_length - pad])
        self._window = tf.constant(window, tf.float32)
        # Where fewer frames overlap (the last hop when n_fft < 4 hops) the summed squared
        # windows fall towards 0; dividing by at least a tenth of their least steady-state value
        # fades the edge instead of amplifying it, and is exact wherever they exceed that.
        squared = np.pad(window ** 2, [0, -n_fft % hop_length]).reshape(-1, hop_length)
        self._envelope_floor = 0.1 * float(squared.sum(axis=0).min())
        self(tf.zeros([1, 1, n_mels]))  # build every weight now, under the caller's device

    @classmethod
    def from_config(cls, config) -> "VocosGenerator":  # pylint: disable=arguments-renamed
        v, d = config.vocoder, config.data
        return cls(d.n_mels, d.n_fft, d.hop_length, d.win_length, v.vocos_channels,
                   v.vocos_layers)

    def describe(self) -> str:
        return f"inverse STFT n_fft {self.n_fft}, hop {self.hop_length}"

    @property
    def receptive_field(self) -> int:
        """Mel frames of context on EACH side that suffice for an output sample: 3 for the
        7-wide input convolution and for each ConvNeXt block's 7-wide depthwise convolution,
        plus the frames whose n_fft-sample windows overlap it in the inverse STFT. A streaming
        driver gives every chunk that many frames of left and right context."""
        return 3 * (1 + len(self.blocks)) + math.ceil(self.n_fft / self.hop_length)

    def call(self, mel):
        x = self.norm_pre(self.conv_pre(mel))
        for block in self.blocks:
            x = block(x)
        return self._inverse_stft(self._head_frames(x))

    def _head_frames(self, x):
        """The head's inverse FFT frames [B, T, n_fft] of the last block's outputs x."""
        out = self.head(self.norm_post(x))
        bins = self.n_fft // 2 + 1
        magnitude = tf.exp(tf.minimum(out[..., :bins], MAX_LOG_MAGNITUDE))
        phase = out[..., bins:]
        real, imag = magnitude * tf.cos(phase), magnitude * tf.sin(phase)
        if in_static_context():  # on-device graphs: no complex tensors, no IRFFT op
            return self._inverse_rfft_as_matmul(real, imag)
        return tf.signal.irfft(tf.complex(real, imag), [self.n_fft])

    def _inverse_rfft_as_matmul(self, real, imag):
        """tf.signal.irfft of real + i*imag [B, T, bins] as two matrix products with the inverse
        real DFT's cosine and sine bases (the imaginary parts of bins 0 and n_fft/2 are
        ignored, as irfft does)."""
        n, bins = self.n_fft, self.n_fft // 2 + 1
        k = np.arange(bins)[:, None]
        angle = 2.0 * np.pi * k * np.arange(n)[None, :] / n
        weight = np.where((k == 0) | (k == n // 2), 1.0, 2.0) / n
        cos = tf.constant((weight * np.cos(angle)).astype(np.float32))
        sin = tf.constant((weight * np.sin(angle)).astype(np.float32))
        return tf.matmul(real, cos) - tf.matmul(imag, sin)

    def _inverse_stft(self, frames):
        """Frames [B, T, n_fft] of the inverse FFT → [B, T * hop] float32, frame i centred on
        sample i * hop."""
        frames = frames * self._window
        audio = tf.signal.overlap_and_add(frames, self.hop_length)
        count = tf.shape(frames)[1]
        envelope = tf.signal.overlap_and_add(
            tf.tile(tf.square(self._window)[None], [count, 1]), self.hop_length)
        audio = audio / tf.maximum(envelope, self._envelope_floor)
        start = self.n_fft // 2
        return audio[:, start:start + count * self.hop_length]


class VocosStream:
    """A Vocos generator run over a growing mel one push at a time, without recomputing any
    frame: `push(frames [N, n_mels] or None, final) -> the samples now final (float32, clipped
    like NeuralVocoder's) or None`. The joined pushes equal `generator(mel)` of the whole mel
    (up to float rounding), however it is cut.

    Each 7-wide convolution (the input one and every block's depthwise one) keeps the last 6
    frames of its input between pushes, so a push computes each of its layers once per new
    frame; a layer's output lags its input by 3 frames (its right context), which the last push
    flushes with the "same" padding's zeros. The inverse STFT keeps the overlap-add's
    n_fft - hop partial samples (and their window envelope) for the next push. One compiled
    call per push; the first call needs more frames than the convolutions' lag (3 per
    convolution; pushes before it are held), as a windowed vocoder's first window needs its
    context."""

    def __init__(self, generator: VocosGenerator):
        self.generator = generator
        self.lag = 3 * (1 + len(generator.blocks))  # frames every convolution holds back
        self.pending = None  # frames held until the first call has enough
        self.state = None  # (convolution caches, overlap-add tail, envelope tail)
        self.to_drop = generator.n_fft // 2  # frame 0 is centred on sample 0

    def push(self, frames, final: bool):
        if frames is not None and len(frames):
            frames = np.asarray(frames, np.float32)
            self.pending = frames if self.pending is None else \
                np.concatenate([self.pending, frames])
        if self.state is None and not final and (
                self.pending is None or len(self.pending) <= self.lag):
            return None
        if self.pending is None and not final:
            return None
        if self.state is None and self.pending is None:  # an empty mel
            return np.zeros([0], np.float32)
        mel = self.pending if self.pending is not None else \
            np.zeros([0, self.generator.n_mels], np.float32)
        self.pending = None
        first = self.state is None
        state = self._initial_state() if first else self.state
        audio, self.state = _stream_call(self.generator, first, final)(
            tf.constant(mel[None]), state)
        audio = audio.numpy()[0]
        if self.to_drop:
            dropped = min(self.to_drop, len(audio))
            audio, self.to_drop = audio[dropped:], self.to_drop - dropped
        return np.clip(audio, -1.0, 1.0)

    def _initial_state(self):
        g = self.generator
        caches = [tf.zeros([1, 0, g.n_mels])] + [
            tf.zeros([1, 0, g.conv_pre.filters]) for _ in g.blocks]
        tail = tf.zeros([1, g.n_fft - g.hop_length])
        return caches, tail, tf.zeros([g.n_fft - g.hop_length])


def _stream_call(generator: VocosGenerator, first: bool, final: bool):
    """The compiled push of `generator` for (first, final): (mel [1, N, n_mels], state) ->
    (samples [1, S], state), cached on the generator."""
    calls = generator.__dict__.setdefault("_stream_calls", {})
    if (first, final) not in calls:
        calls[(first, final)] = tf.function(
            lambda mel, state: _stream_step(generator, mel, state, first, final),
            reduce_retracing=True)
    return calls[(first, final)]


def _conv7(x, cache, kernel, bias, depthwise: bool, first: bool, final: bool):
    """A 7-wide "same" convolution over the frames `x` that follow its cached input: (the
    outputs whose right context is in, the inputs they are centred on, the new cache of the
    last 6 inputs)."""
    zeros = tf.zeros([tf.shape(x)[0], 3, tf.shape(x)[2]], x.dtype)
    parts = ([zeros] if first else [cache]) + [x] + ([zeros] if final else [])
    buffer = tf.concat(parts, axis=1)
    kernel = tf.cast(kernel, x.dtype)
    if depthwise:
        y = tf.nn.depthwise_conv2d(buffer[:, None], kernel[None], [1, 1, 1, 1], "VALID")[:, 0]
    else:
        y = tf.nn.conv1d(buffer, kernel, 1, "VALID")
    return y + tf.cast(bias, y.dtype), buffer[:, 3:-3], buffer[:, -6:]


def _stream_step(g: VocosGenerator, mel, state, first: bool, final: bool):
    caches, tail, envelope_tail = state
    x, _, cache = _conv7(mel, caches[0], g.conv_pre.kernel, g.conv_pre.bias, False, first,
                         final)
    new_caches = [cache]
    x = g.norm_pre(x)
    for block, cache in zip(g.blocks, caches[1:]):
        y, residual, cache = _conv7(x, cache, block.depthwise.kernel, block.depthwise.bias,
                                    True, first, final)
        new_caches.append(cache)
        y = block.project(block.expand(block.norm(y)))
        x = residual + tf.cast(block.scale, y.dtype) * y
    frames = g._head_frames(x) * g._window  # pylint: disable=protected-access
    count = tf.shape(frames)[1]
    keep = g.n_fft - g.hop_length
    audio = tf.signal.overlap_and_add(frames, g.hop_length)
    envelope = tf.signal.overlap_and_add(tf.tile(tf.square(g._window)[None], [count, 1]),
                                         g.hop_length)  # pylint: disable=protected-access
    audio = tf.concat([audio[:, :keep] + tail, audio[:, keep:]], axis=1)
    envelope = tf.concat([envelope[:keep] + envelope_tail, envelope[keep:]], axis=0)
    done = count * g.hop_length + (g.n_fft // 2 if final else 0)
    out_audio = audio[:, :done] / tf.maximum(envelope[:done], g._envelope_floor)  # pylint: disable=protected-access
    return out_audio, (new_caches, audio[:, count * g.hop_length:],
                       envelope[count * g.hop_length:])
