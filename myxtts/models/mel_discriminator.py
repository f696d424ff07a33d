"""A voice-conditioned discriminator of mel frames (training.adversarial_weight): it learns to
tell a recording's log-mel from the acoustic model's teacher-forced output for the same line,
given the voice they should be in, and its judgement and its features become losses that ask
the model to write mels a recording of that voice could have, not the average an L1 loss is
least for (docs/model.md, "Adversarial mel loss").

    disc = MelDiscriminator(n_mels, name="mel_discriminator")
    logits, features = disc(mel, frames, voice)
        mel      [B, T, n_mels]   log-mel (recorded or written), any float dtype
        frames   [B, T] float32   1 on valid frames; padding is zeroed before the first layer
        voice    [B, d] float32   the voice the frames should be in (the model's speaker
                                  embedding of the item's reference, without gradient)
        logits   float32 [B, T]   one judgement per frame, from the frames around it
        features list of float32 [B, T, channels]: every layer's output (feature matching)

Convolutions over time with the mel bands as channels, dilated (DISCRIMINATOR_DILATIONS) so
a logit sees 61 frames (~1 s), leaky ReLU between them. The voice enters as a projection
discriminator's does (Miyato & Koyama, 2018): the frame's logit is a linear
function of its last features plus their dot product with a projection of the l2-normalised
voice, so "real" means "a recording of this voice", not only "a recording". The mel goes in
as it is (the reading probe centres each frame's bands; here level and tilt are part of the
voice).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.models.layers import indexed

DISCRIMINATOR_CHANNELS = 128
DISCRIMINATOR_DILATIONS = (1, 2, 4, 8)  # kernel 5: 61 frames (~1 s at hop 256 / 16 kHz)
DISCRIMINATOR_KERNEL = 5
LEAK = 0.2


class MelDiscriminator(keras.Model):
    def __init__(self, n_mels: int, channels: int = DISCRIMINATOR_CHANNELS, **kwargs):
        super().__init__(**kwargs)
        self.n_mels, self.channels = n_mels, channels
        self.convs = indexed(self, "conv", [
            keras.layers.Conv1D(channels, DISCRIMINATOR_KERNEL, padding="same",
                                dilation_rate=d, name=f"conv_{i}")
            for i, d in enumerate(DISCRIMINATOR_DILATIONS)])
        self.logit = keras.layers.Dense(1, name="logit")
        self.voice_projection = keras.layers.Dense(channels, use_bias=False,
                                                   name="voice_projection")

    def call(self, mel, frames, voice):
        mask = tf.cast(frames, self.compute_dtype)[..., None]
        x = tf.cast(mel, self.compute_dtype) * mask
        features = []
        for conv in self.convs:
            x = tf.nn.leaky_relu(conv(x), LEAK) * mask
            features.append(tf.cast(x, tf.float32))
        voice = tf.math.l2_normalize(tf.cast(voice, tf.float32), axis=-1)
        projected = tf.cast(self.voice_projection(tf.cast(voice, self.compute_dtype)),
                            tf.float32)
        last = features[-1]
        logits = (tf.cast(self.logit(x), tf.float32)[..., 0]
                  + tf.reduce_sum(last * projected[:, None, :], axis=-1))
        return logits, features
