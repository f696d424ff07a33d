"""A small recogniser trained beside the acoustic model (model.reading_probe): it learns to read
the text off recorded mels (CTC over the tokens), and the model's own teacher-forced output
is read by it too, so that what the model writes for a line must carry that line's sounds,
not only lie near its recording on average. The same idea as an ASR-consistency or
"recognisability" loss in TTS training, with the recogniser learnt on the corpus itself
(no pretrained model: there is none offline for every language).

    probe = ReadingProbe(vocab_size, n_mels, name="reading_probe")
    logits = probe(mel)                      # float32 [B, T_mel, vocab_size]; learns
    logits = probe(mel, frozen=True)         # the same weights, no gradient into them

Token id 0 (padding) is the CTC blank. The frozen call is how the model's output is read: its
gradient reaches the output (and the acoustic model), never the probe's weights, so the probe
cannot learn to read the model's writing by cues the recordings do not have; it is only ever
taught on recordings.
"""

from __future__ import annotations

import keras
import tensorflow as tf

PROBE_CHANNELS = 128
PROBE_DILATIONS = (1, 2, 4)  # 3 layers of kernel 5: 29 frames (~0.46 s at hop 256 / 16 kHz)
PROBE_KERNEL = 5


class ReadingProbe(keras.layers.Layer):
    def __init__(self, vocab_size: int, n_mels: int, channels: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.n_mels, self.channels = vocab_size, n_mels, channels
        # One attribute per weight: a checkpoint finds weights by attribute, not in lists.
        width = n_mels
        for i, _ in enumerate(PROBE_DILATIONS):
            setattr(self, f"conv{i}_kernel", self.add_weight(
                shape=(PROBE_KERNEL, width, channels), initializer="he_normal",
                name=f"conv{i}_kernel"))
            setattr(self, f"conv{i}_bias", self.add_weight(
                shape=(channels,), initializer="zeros", name=f"conv{i}_bias"))
            width = channels
        self.out_kernel = self.add_weight(shape=(channels, vocab_size),
                                          initializer="glorot_uniform", name="out_kernel")
        self.out_bias = self.add_weight(shape=(vocab_size,), initializer="zeros",
                                        name="out_bias")

    def call(self, mel, frozen: bool = False):
        def weight(w):
            w = tf.cast(w, self.compute_dtype)
            return tf.stop_gradient(w) if frozen else w

        # Each frame's bands centred: the probe reads the spectral shape, not the level.
        x = tf.cast(mel, self.compute_dtype)
        x = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        for i, dilation in enumerate(PROBE_DILATIONS):
            kernel, bias = getattr(self, f"conv{i}_kernel"), getattr(self, f"conv{i}_bias")
            # tf.nn.convolution, not tf.nn.conv1d: TensorFlow's CPU kernels without oneDNN have
            # no input gradient for conv1d's dilations (devices.choose_cpu_kernels).
            x = tf.nn.relu(tf.nn.convolution(x, weight(kernel), padding="SAME",
                                             dilations=dilation) + weight(bias))
        logits = tf.matmul(x, weight(self.out_kernel)) + weight(self.out_bias)
        return tf.cast(logits, tf.float32)
