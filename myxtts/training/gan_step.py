"""The vocoder's compiled training step on the model device: one discriminator update, then one
generator update, in one `tf.function(jit_compile=...)`, as in HiFi-GAN's reference code.

    step = GANStep(generator, mpd, msd, vocoder_config, log_mel, model_device=..., precision=...)
    out = step(batch, adversarial=True)   # False: generator-only warm-up (mel loss alone)

The generator runs once per step: its output feeds the discriminator update (gradient stopped)
and, after that update, the generator's adversarial and feature-matching losses. Each side has
its own AdamW (betas and decay of the paper) built here, inside the model-device scope, so every
slot, iteration counter and loss-scale variable is created there; under float16 each is wrapped
in its own LossScaleOptimizer (an overflow in one does not reset the other's scale). Non-finite
updates are skipped and counted per side (myxtts.training.update_side).
"""

from __future__ import annotations

from typing import Dict, List

import keras
import tensorflow as tf

from myxtts.training.optimization import FusedAdamW, no_decay_variables
from myxtts.training.update_side import UpdateSide
from myxtts.vocoder import losses

# HiFi-GAN uses torch.optim.AdamW with its default weight decay.
WEIGHT_DECAY = 0.01
LOSS_NAMES = ("total", "mel", "stft", "adversarial", "feature_matching", "discriminator")


def build_gan_optimizer(vocoder_config, models: List[keras.Model], loss_scaling: bool):
    """A built AdamW (optimization.FusedAdamW; LossScaleOptimizer when loss_scaling) for the
    models' trainable variables."""
    v = vocoder_config
    schedule = keras.optimizers.schedules.ExponentialDecay(v.learning_rate, 1000, v.lr_decay)
    optimizer = FusedAdamW(schedule, beta_1=v.beta_1, beta_2=v.beta_2, weight_decay=WEIGHT_DECAY)
    optimizer.exclude_from_weight_decay(
        var_list=[w for m in models for w in no_decay_variables(m)])
    if loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build([w for m in models for w in m.trainable_variables])
    return optimizer


class GANStep:
    """Owns both optimizers, the step counter and on-device metrics; call it inside nothing
    (it enters the model device itself)."""

    def __init__(self, generator, mpd, msd, vocoder_config, log_mel, *, model_device: str,
                 loss_scaling: bool, jit_compile: bool):
        self.generator, self.mpd, self.msd = generator, mpd, msd
        self.config = vocoder_config
        self.log_mel = log_mel
        self.model_device = model_device
        with tf.device(model_device):
            self.gen = UpdateSide("generator", [generator], build_gan_optimizer(
                vocoder_config, [generator], loss_scaling), loss_scaling)
            self.disc = UpdateSide("discriminator", [mpd, msd], build_gan_optimizer(
                vocoder_config, [mpd, msd], loss_scaling), loss_scaling)
            # Generator updates attempted (applied + skipped): the step users see.
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.loss_metrics = {name: keras.metrics.Mean(name=f"loss_{name}")
                                 for name in LOSS_NAMES}
        self._compiled = tf.function(self._step, jit_compile=jit_compile, reduce_retracing=False)

    def __call__(self, batch: Dict[str, tf.Tensor], adversarial: bool = True):
        with tf.device(self.model_device):
            return self._compiled(batch, adversarial)

    # -- metrics -------------------------------------------------------------------------------
    def reset_metrics(self) -> None:
        for metric in [self.gen.grad_norm, self.disc.grad_norm, *self.loss_metrics.values()]:
            metric.reset_state()

    def metric_results(self) -> Dict[str, float]:
        out = {name: float(m.result()) for name, m in self.loss_metrics.items()}
        out["grad_norm"] = float(self.gen.grad_norm.result())
        out["grad_norm_discriminator"] = float(self.disc.grad_norm.result())
        return out

    def learning_rate(self) -> float:
        return float(self.gen.optimizer.learning_rate.numpy())

    # -- the step ------------------------------------------------------------------------------
    def _discriminate(self, audio):
        return self.mpd(audio, training=True) + self.msd(audio, training=True)

    def _step(self, batch, adversarial: bool):
        with tf.device(self.model_device):
            audio, mel, target = batch["audio"], batch["mel"], batch["mel_target"]
            zero = tf.constant(0.0)
            with tf.GradientTape() as g_tape:
                fake = self.generator(mel, training=True)
                d_loss = zero
                if adversarial:
                    with g_tape.stop_recording():  # the discriminator update is not G's
                        with tf.GradientTape() as d_tape:
                            d_loss = losses.discriminator_loss(
                                self._discriminate(audio),
                                self._discriminate(tf.stop_gradient(fake)))
                            d_scaled = self.disc.scale(d_loss)
                        self.disc.apply(d_tape.gradient(d_scaled, self.disc.variables))
                mel_loss = losses.mel_l1(self.log_mel, fake, target)
                total = self.config.mel_loss_weight * losses.LN10 * mel_loss
                stft = zero
                if self.config.stft_loss_weight:
                    stft = losses.stft_loss(fake, audio, self.config.stft_resolutions)
                    total = total + self.config.stft_loss_weight * stft
                adv = fm = zero
                if adversarial:
                    real_out = self._discriminate(audio)
                    fake_out = self._discriminate(fake)
                    adv = losses.generator_adversarial_loss(fake_out)
                    fm = losses.feature_matching_loss(real_out, fake_out)
                    total = total + adv + self.config.feature_matching_weight * fm
                g_scaled = self.gen.scale(total)
            self.gen.apply(g_tape.gradient(g_scaled, self.gen.variables))
            self.step.assign_add(1)
            values = {"total": total, "mel": mel_loss, "stft": stft, "adversarial": adv,
                      "feature_matching": fm, "discriminator": d_loss}
            if adversarial:
                for name, metric in self.loss_metrics.items():
                    metric.update_state(values[name])
            else:
                for name in ("total", "mel", "stft"):
                    self.loss_metrics[name].update_state(values[name])
            consecutive = tf.maximum(self.gen.nonfinite_consecutive.read_value(),
                                     self.disc.nonfinite_consecutive.read_value())
            return {"total": total, "mel": mel_loss, "consecutive_nonfinite": consecutive}
