"""Batched mel → waveform for synthesis and serving, the same ops in both.

myxtts has no neural vocoder model yet, so the waveform comes from Griffin-Lim
(myxtts.inference.griffin_lim, tf.signal): intelligible but phasey audio. `describe()` says so in
the logs of the synthesis CLI and the exporter.
"""

from __future__ import annotations

import math
from typing import Tuple

import tensorflow as tf

from myxtts.inference.griffin_lim import GriffinLim

GRIFFIN_LIM_ITERATIONS = 32


def trim_to_longest(mel: tf.Tensor, mel_lengths: tf.Tensor) -> tf.Tensor:
    """`generate`'s static-length mel [B, max_steps*r, n] cut to the longest item's frames."""
    return mel[:, :tf.reduce_max(mel_lengths)]


class GriffinLimVocoder:
    """`vocoder(mel [B, T, n_mels] log10, mel_lengths [B]) -> (waveform [B, S] float32,
    waveform_lengths [B] int32)`; samples past an item's length are 0.

    Each item is inverted over the batch's T frames with its padding frames at log10(mel_floor)
    (silence), so item b of a batch of one equals the inversion of mel[b, :mel_lengths[b]].
    An item of L frames gives (L-1)*hop + win samples (tf.signal.inverse_stft)."""

    def __init__(self, data_config, iterations: int = GRIFFIN_LIM_ITERATIONS):
        d = data_config
        self.iterations = iterations
        self.hop, self.win = d.hop_length, d.win_length
        self.log_floor = math.log10(d.mel_floor)
        self.griffin_lim = GriffinLim.from_config(d, iterations)

    def describe(self) -> str:
        return (f"Vocoder: Griffin-Lim ({self.iterations} iterations, tf.signal). myxtts has no "
                f"trained vocoder model yet, so mels are inverted with Griffin-Lim; expect "
                f"intelligible but phasey audio.")

    def __call__(self, mel, mel_lengths) -> Tuple[tf.Tensor, tf.Tensor]:
        mel = tf.convert_to_tensor(mel, tf.float32)
        mel_lengths = tf.cast(mel_lengths, tf.int32)
        valid = tf.sequence_mask(mel_lengths, tf.shape(mel)[1])[:, :, None]
        floored = tf.where(valid, mel, tf.constant(self.log_floor, tf.float32))
        waveform = tf.map_fn(self.griffin_lim, floored, fn_output_signature=tf.float32)
        lengths = tf.where(mel_lengths > 0, (mel_lengths - 1) * self.hop + self.win, 0)
        lengths = tf.minimum(lengths, tf.shape(waveform)[1])
        keep = tf.sequence_mask(lengths, tf.shape(waveform)[1], dtype=tf.float32)
        return waveform * keep, lengths
