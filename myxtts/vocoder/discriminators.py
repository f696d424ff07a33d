"""HiFi-GAN discriminators: multi-period (MPD) and multi-scale (MSD).

Both map audio [B, S] to a list of (score map, feature maps), one per sub-discriminator; the
losses (myxtts.vocoder.losses) use the scores for the least-squares GAN terms and the feature maps
for feature matching. `width` scales every channel count (1.0 = the paper; the tiny preset uses
0.125 so a CPU can train it). Spectral/weight normalisation of the paper is left out (see
docs/vocoder.md).
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import keras
import tensorflow as tf

from myxtts.models.layers import indexed
from myxtts.vocoder.generator import LRELU_SLOPE

Outputs = List[Tuple[tf.Tensor, List[tf.Tensor]]]


def _width(channels: int, width: float) -> int:
    return max(1, int(round(channels * width)))


def _conv_stack(convs, post, x) -> Tuple[tf.Tensor, List[tf.Tensor]]:
    """LeakyReLU after every conv, then the output conv; returns (score map, feature maps)."""
    features = []
    for conv in convs:
        x = tf.nn.leaky_relu(conv(x), LRELU_SLOPE)
        features.append(x)
    x = post(x)
    features.append(x)
    return x, features


class PeriodDiscriminator(keras.layers.Layer):
    """Audio folded into [B, S/p, p, 1]: 2-D convs with (k, 1) kernels see every p-th sample."""

    def __init__(self, period: int, width: float, **kwargs):
        super().__init__(**kwargs)
        self.period = period
        self.convs = indexed(self, "conv", [
            keras.layers.Conv2D(_width(c, width), (5, 1), strides=(s, 1), padding="same",
                                name=f"conv_{i}")
            for i, (c, s) in enumerate([(32, 3), (128, 3), (512, 3), (1024, 3), (1024, 1)])])
        self.post = keras.layers.Conv2D(1, (3, 1), padding="same", name="post")

    def call(self, audio):
        p = self.period
        pad = (-tf.shape(audio)[1]) % p
        x = tf.pad(audio, [[0, 0], [0, pad]], mode="REFLECT")
        x, features = _conv_stack(self.convs, self.post,
                                  tf.reshape(x, [tf.shape(x)[0], -1, p, 1]))
        return tf.cast(tf.reshape(x, [tf.shape(x)[0], -1]), tf.float32), features


class ScaleDiscriminator(keras.layers.Layer):
    """Strided, grouped 1-D convs over the waveform (one scale). `grouped=False` uses plain
    convolutions: TensorFlow has no fast grouped-convolution kernel on CPUs (Keras falls back to
    an XLA function per call), so the CPU preset trades the groups for speed."""

    LAYERS = [(16, 15, 1, 1), (64, 41, 4, 4), (256, 41, 4, 16), (1024, 41, 4, 64),
              (1024, 41, 4, 256), (1024, 5, 1, 1)]  # channels, kernel, stride, groups

    def __init__(self, width: float, grouped: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.convs, previous = [], 1
        for i, (c, k, s, g) in enumerate(self.LAYERS):
            out = _width(c, width)
            groups = math.gcd(g, math.gcd(previous, out)) if grouped else 1
            self.convs.append(keras.layers.Conv1D(out, k, strides=s, groups=groups,
                                                  padding="same", name=f"conv_{i}"))
            previous = out
        indexed(self, "conv", self.convs)
        self.post = keras.layers.Conv1D(1, 3, padding="same", name="post")

    def call(self, audio):
        x, features = _conv_stack(self.convs, self.post, audio[..., None])
        return tf.cast(x[..., 0], tf.float32), features


class MultiPeriodDiscriminator(keras.Model):
    def __init__(self, periods: Sequence[int] = (2, 3, 5, 7, 11), width: float = 1.0, **kwargs):
        kwargs.setdefault("name", "mpd")
        super().__init__(**kwargs)
        self.discriminators = indexed(self, "discriminator", [
            PeriodDiscriminator(p, width, name=f"period_{p}") for p in periods])
        self(tf.zeros([1, 64]))

    def call(self, audio) -> Outputs:
        return [d(audio) for d in self.discriminators]


class MultiScaleDiscriminator(keras.Model):
    """Scale 0 sees the waveform, scale i the waveform average-pooled i times (4 wide, stride 2)."""

    def __init__(self, scales: int = 3, width: float = 1.0, grouped: bool = True, **kwargs):
        kwargs.setdefault("name", "msd")
        super().__init__(**kwargs)
        self.discriminators = indexed(self, "discriminator", [
            ScaleDiscriminator(width, grouped, name=f"scale_{i}") for i in range(scales)])
        self(tf.zeros([1, 64]))

    def call(self, audio) -> Outputs:
        outputs, x = [], audio
        for i, d in enumerate(self.discriminators):
            if i:
                x = tf.nn.avg_pool1d(x[..., None], 4, 2, "SAME")[..., 0]
            outputs.append(d(x))
        return outputs
