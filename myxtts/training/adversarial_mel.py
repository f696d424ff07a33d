"""The adversarial mel loss of the acoustic trainer (training.adversarial_weight > 0): a
voice-conditioned discriminator (myxtts.models.mel_discriminator) learns, beside the model, to
tell each item's recorded log-mel from the model's teacher-forced postnet output for it, given
the item's voice; the model is asked to write frames it takes for recordings (least-squares
GAN) and whose discriminator features match the recording's at the same frames (feature
matching: the teacher-forced output is frame-aligned with its recording).

    adversary = AdversarialMel(n_mels, voice_dim, training_config, loss_scaling)  # model scope
    terms = adversary.losses(outputs, batch, step, training=True)

`losses` runs inside the compiled training step, inside the model's gradient tape: with
`training`, it first updates the discriminator once on this micro-batch (the output's gradient
stopped, its own tape, its own optimizer and loss scale: myxtts.training.update_side), then
returns the model's terms computed with the updated discriminator, as HiFi-GAN's step does:

    "adversarial"         masked mean over valid frames of (1 - D(output))²
    "feature_matching"    mean over the discriminator's layers of the masked mean
                          |features(recording) - features(output)| (recording side without
                          gradient)
    "discriminator"       masked mean of (1 - D(recording))² + D(output)², the discriminator's
                          loss (before its update)
    "adversarial_on"      1.0 from training.adversarial_start_step on, else 0.0: the model's
                          terms enter the loss only then (the discriminator learns from the
                          first step, so it is not a blank judge when they start)

The discriminator judges one window of WINDOW_FRAMES frames of each item (2 s at hop 256 /
16 kHz; the whole item when shorter), the same window of the recording and of the output, at
an offset drawn per item and step from the step number (a resumed run draws the same
windows): its cost then does not grow with the items' length (whole items of up to 8 s made
clone_quick's step about twice as slow).

The voice each frame is judged in is the model's speaker embedding of the item's reference
(`outputs["speaker_embedding"]`, gradient stopped): real means "a recording of this voice".
Only frames within each item's length count. With gradient accumulation the discriminator is
updated every micro-batch. Under a tf.distribute strategy it is refused (the trainer says so):
its update would run per replica.
"""

from __future__ import annotations

from typing import Dict, List

import keras
import tensorflow as tf

from myxtts.config import TrainingConfig
from myxtts.models.mel_discriminator import MelDiscriminator
from myxtts.training.optimization import no_decay_variables
from myxtts.training.update_side import UpdateSide

# The discriminator's AdamW: a low first-moment beta, common in GAN training, so the judge
# follows a moving target quickly (the vocoder's HiFi-GAN uses 0.8 / 0.99); a constant
# learning rate (training.discriminator_learning_rate).
DISCRIMINATOR_BETAS = (0.5, 0.9)
DISCRIMINATOR_WEIGHT_DECAY = 0.01
WINDOW_FRAMES = 128


def judged_windows(real: tf.Tensor, fake: tf.Tensor, lengths: tf.Tensor, step,
                   frames: int = WINDOW_FRAMES):
    """The same window of `frames` frames of every item of real and fake [B, T, M], at a random
    offset within the item's length (drawn from `step`), and its valid-frame mask [B, frames]:
    (real windows, fake windows, mask). Items shorter than the window start at 0."""
    lengths = tf.cast(lengths, tf.int32)
    room = tf.maximum(lengths - frames, 0)
    seed = tf.stack([tf.cast(step, tf.int32), tf.constant(0x6164, tf.int32)])
    draw = tf.random.stateless_uniform(tf.shape(lengths), seed)
    offsets = tf.minimum(tf.cast(draw * tf.cast(room + 1, tf.float32), tf.int32), room)
    positions = offsets[:, None] + tf.range(frames)[None, :]                        # [B, W]
    index = tf.minimum(positions, tf.shape(real)[1] - 1)
    mask = tf.cast(positions < lengths[:, None], tf.float32)
    return (tf.gather(real, index, axis=1, batch_dims=1),
            tf.gather(fake, index, axis=1, batch_dims=1), mask)


def _masked_frame_mean(values: tf.Tensor, frames: tf.Tensor) -> tf.Tensor:
    """Mean of values [B, T] or [B, T, C] over the valid frames (`frames` [B, T], 1 or 0)."""
    if values.shape.rank == 3:
        values = tf.reduce_mean(values, axis=-1)
    return tf.reduce_sum(values * frames) / tf.maximum(tf.reduce_sum(frames), 1.0)


def discriminator_loss(real_logits, fake_logits, frames) -> tf.Tensor:
    return _masked_frame_mean(tf.square(1.0 - real_logits) + tf.square(fake_logits), frames)


def generator_loss(fake_logits, frames) -> tf.Tensor:
    return _masked_frame_mean(tf.square(1.0 - fake_logits), frames)


def feature_matching_loss(real: List[tf.Tensor], fake: List[tf.Tensor], frames) -> tf.Tensor:
    return tf.add_n([_masked_frame_mean(tf.abs(tf.stop_gradient(r) - f), frames)
                     for r, f in zip(real, fake)]) / float(len(real))


class AdversarialMel:
    """Owns the discriminator, its optimizer and its counters; create it inside the model-device
    scope (everything it creates lands there)."""

    def __init__(self, n_mels: int, voice_dim: int, training_config: TrainingConfig,
                 loss_scaling: bool):
        self.start_step = int(training_config.adversarial_start_step)
        self.discriminator = MelDiscriminator(n_mels, name="mel_discriminator")
        self.discriminator(tf.zeros([1, 4, n_mels]), tf.ones([1, 4]), tf.ones([1, voice_dim]))
        optimizer = keras.optimizers.AdamW(
            training_config.discriminator_learning_rate, beta_1=DISCRIMINATOR_BETAS[0],
            beta_2=DISCRIMINATOR_BETAS[1], weight_decay=DISCRIMINATOR_WEIGHT_DECAY)
        optimizer.exclude_from_weight_decay(var_list=no_decay_variables(self.discriminator))
        if loss_scaling:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(self.discriminator.trainable_variables)
        self.side = UpdateSide("discriminator", [self.discriminator], optimizer, loss_scaling)

    def checkpoint_objects(self) -> Dict[str, object]:
        """What a checkpoint needs for a resumed run to go on with the same discriminator."""
        return {"mel_discriminator": self.discriminator,
                "discriminator_optimizer": self.side.optimizer,
                "discriminator_nonfinite_total": self.side.nonfinite_total}

    def losses(self, outputs: Dict[str, tf.Tensor], batch: Dict[str, tf.Tensor], step,
               training: bool) -> Dict[str, tf.Tensor]:
        real, fake, frames = judged_windows(tf.cast(batch["mel"], tf.float32),
                                            outputs["mel_after"], batch["mel_lengths"], step)
        voice = tf.stop_gradient(outputs["speaker_embedding"])

        def judged(mel):
            return self.discriminator(mel, frames, voice)

        def d_loss():
            return discriminator_loss(judged(real)[0], judged(tf.stop_gradient(fake))[0], frames)

        if training:
            with tf.GradientTape() as tape:
                loss_d = d_loss()
                scaled = self.side.scale(loss_d)
            self.side.apply(tape.gradient(scaled, self.side.variables))
        else:
            loss_d = d_loss()
        _, real_features = judged(real)
        fake_logits, fake_features = judged(fake)
        return {"adversarial": generator_loss(fake_logits, frames),
                "feature_matching": feature_matching_loss(real_features, fake_features, frames),
                "discriminator": loss_d,
                "adversarial_on": tf.cast(tf.cast(step, tf.int64) >= self.start_step,
                                          tf.float32)}
