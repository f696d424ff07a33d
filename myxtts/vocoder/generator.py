"""HiFi-GAN generator (Kong et al., 2020): log10 mel [B, T, n_mels] → waveform [B, T * hop].

    generator = HiFiGANGenerator.from_config(config)      # weights built here (device scope!)
    audio = generator(mel)                                # float32 [B, T * hop_length]

Transposed convolutions upsample by `upsample_rates` (their product is data.hop_length, so frame
i produces samples [i*hop, (i+1)*hop), the hop that starts where the centred feature frame i is
centred); after each one a multi-receptive-field fusion (MRF) block averages residual blocks of
different kernel sizes and dilations. Presets (vocoder.preset):

    tiny   64 channels, residual blocks of type 2 (one conv per dilation), 1/8-wide
           discriminators without grouped convolutions: trains on a CPU
    small  128 channels, type 1 blocks, kernels 3/7/11, dilations 1/3/5: the paper's V2
    full   512 channels, same blocks: the paper's V1

Weight normalisation of the paper is left out (Keras 3 has no weight-norm wrapper; the
generator trains without it, see docs/vocoder.md).
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Sequence, Tuple

import keras
import tensorflow as tf

from myxtts.models.layers import indexed

LRELU_SLOPE = 0.1


@dataclasses.dataclass(frozen=True)
class Preset:
    channels: int
    resblock: int  # 1: two convs per dilation (V1/V2); 2: one conv per dilation (V3)
    kernels: Tuple[int, ...]
    dilations: Tuple[Tuple[int, ...], ...]
    discriminator_width: float  # channel multiplier of both discriminators
    grouped_msd: bool  # grouped convs in the MSD (the paper); off for CPUs (discriminators.py)


PRESETS = {
    "tiny": Preset(64, 2, (3, 7), ((1, 3), (1, 3)), 0.125, False),
    "small": Preset(128, 1, (3, 7, 11), ((1, 3, 5),) * 3, 1.0, True),
    "full": Preset(512, 1, (3, 7, 11), ((1, 3, 5),) * 3, 1.0, True),
}


def upsample_rates_for(hop_length: int) -> List[int]:
    """Upsampling factors whose product is `hop_length`: the first two stages take the largest
    divisor up to 8, the rest is split into prime factors, merged smallest-pair-first down to
    two (256 → 8, 8, 2, 2 as in the paper; 300 → 6, 5, 5, 2; 200 → 8, 5, 5)."""
    rates, n = [], hop_length
    for _ in range(2):
        d = max(k for k in range(1, 9) if n % k == 0)
        if d > 1:
            rates.append(d)
            n //= d
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    while len(factors) > 2:
        factors.sort()
        factors = [factors[0] * factors[1]] + factors[2:]
    return rates + sorted(factors, reverse=True) or [1]


class ResBlock(keras.layers.Layer):
    """Residual block: per dilation, LeakyReLU → conv(dilated) [→ LeakyReLU → conv] + input."""

    def __init__(self, channels: int, kernel: int, dilations: Sequence[int], kind: int,
                 **kwargs):
        super().__init__(**kwargs)
        self.convs1 = indexed(self, "conv1", [
            keras.layers.Conv1D(channels, kernel, dilation_rate=d, padding="same",
                                name=f"conv1_{i}") for i, d in enumerate(dilations)])
        self.convs2 = indexed(self, "conv2", [
            keras.layers.Conv1D(channels, kernel, padding="same", name=f"conv2_{i}")
            for i in range(len(dilations))] if kind == 1 else [])

    def call(self, x):
        for i, conv in enumerate(self.convs1):
            y = conv(tf.nn.leaky_relu(x, LRELU_SLOPE))
            if self.convs2:
                y = self.convs2[i](tf.nn.leaky_relu(y, LRELU_SLOPE))
            x = x + y
        return x


def _block_context(block: ResBlock) -> int:
    """Samples of context on each side of a residual block's output ("same" convolutions)."""
    return sum((conv.kernel_size[0] - 1) // 2 * conv.dilation_rate[0]
               for conv in [*block.convs1, *block.convs2])


class HiFiGANGenerator(keras.Model):
    vocoder_name = "HiFi-GAN"  # in logs: "Vocoder: HiFi-GAN ..."

    def __init__(self, n_mels: int, upsample_rates: Sequence[int], preset: str = "small",
                 channels: int = 0, **kwargs):
        kwargs.setdefault("name", "hifigan_generator")
        super().__init__(**kwargs)
        spec = PRESETS[preset]
        self.n_mels = n_mels
        self.upsample_rates = [int(r) for r in upsample_rates]
        self.hop_length = 1
        for r in self.upsample_rates:
            self.hop_length *= r
        channels = channels or spec.channels
        self.conv_pre = keras.layers.Conv1D(channels, 7, padding="same", name="conv_pre")
        self.ups, self.mrfs = [], []
        for i, rate in enumerate(self.upsample_rates):
            width = max(1, channels // 2 ** (i + 1))
            self.ups.append(keras.layers.Conv1DTranspose(
                width, 2 * rate if rate > 1 else 1, strides=rate, padding="same", name=f"up_{i}"))
            self.mrfs.append(indexed(self, f"mrf_{i}", [
                ResBlock(width, k, d, spec.resblock, name=f"mrf_{i}_{j}")
                for j, (k, d) in enumerate(zip(spec.kernels, spec.dilations))]))
        indexed(self, "up", self.ups)
        self.conv_post = keras.layers.Conv1D(1, 7, padding="same", name="conv_post")
        self(tf.zeros([1, 1, n_mels]))  # build every weight now, under the caller's device

    @classmethod
    def from_config(cls, config) -> "HiFiGANGenerator":  # pylint: disable=arguments-renamed
        v, d = config.vocoder, config.data
        rates = list(v.upsample_rates) or upsample_rates_for(d.hop_length)
        return cls(d.n_mels, rates, v.preset, v.upsample_initial_channel)

    def describe(self) -> str:
        return "upsampling " + "x".join(map(str, self.upsample_rates))

    @property
    def receptive_field(self) -> int:
        """Mel frames of context on EACH side that suffice for an output sample ("same"
        padding everywhere): the input conv's 3 frames, one input position per transposed
        convolution, the widest residual branch per upsampling stage and the output conv's 3
        samples, each at its stage's rate, rounded up. A streaming driver gives every chunk
        that many frames of left and right context."""
        frames, rate = 3.0, 1
        for up, blocks in zip(self.ups, self.mrfs):
            frames += 1.0 / rate  # a transposed conv of kernel 2r and stride r: ±1 input
            rate *= up.strides[0]
            frames += max(_block_context(block) for block in blocks) / rate
        return math.ceil(frames + 3.0 / rate)

    def call(self, mel):
        x = self.conv_pre(mel)
        for up, blocks in zip(self.ups, self.mrfs):
            x = up(tf.nn.leaky_relu(x, LRELU_SLOPE))
            x = tf.add_n([block(x) for block in blocks]) / float(len(blocks))
        # PyTorch's default LeakyReLU slope (0.01) before the output conv, as in the paper's code
        x = self.conv_post(tf.nn.leaky_relu(x, 0.01))
        return tf.cast(tf.tanh(x)[..., 0], tf.float32)


def build_generator(config) -> keras.Model:
    """The generator vocoder.generator names (hifigan: this module's; vocos: myxtts.vocoder.vocos),
    built under the caller's device scope."""
    if config.vocoder.generator == "vocos":
        from myxtts.vocoder.vocos import VocosGenerator  # pylint: disable=import-outside-toplevel
        return VocosGenerator.from_config(config)
    return HiFiGANGenerator.from_config(config)
