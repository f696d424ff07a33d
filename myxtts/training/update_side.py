"""One side of an adversarial step: an optimizer with its variables, its non-finite counters
and its gradient-norm metric. The vocoder's GANStep has two (generator and discriminators).

    side = UpdateSide("discriminator", [disc], optimizer, loss_scaling)
    side.apply(tape.gradient(side.scale(loss), side.variables))

Non-finite updates are skipped and counted, as in myxtts.training.step: under float16 the
side's own LossScaleOptimizer skips them and halves its scale (an overflow on one side does not
reset another's scale); otherwise the update is not applied. Create it inside the model-device
scope, with an optimizer built there, so its counters live beside the variables.
"""

from __future__ import annotations

from typing import List

import keras
import tensorflow as tf


class UpdateSide:
    def __init__(self, name: str, models: List[keras.Model], optimizer, loss_scaling: bool):
        self.models = models
        self.optimizer = optimizer
        self.loss_scaling = loss_scaling
        self.nonfinite_total = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name=f"{name}_nonfinite_total")
        self.nonfinite_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                 name=f"{name}_nonfinite_consecutive")
        self.grad_norm = keras.metrics.Mean(name=f"{name}_grad_norm")

    @property
    def variables(self):
        return [w for m in self.models for w in m.trainable_variables]

    def scale(self, loss):
        return self.optimizer.scale_loss(loss) if self.loss_scaling else loss

    def apply(self, grads):
        variables = self.variables
        grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                 for g, v in zip(grads, variables)]
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        scale = self.optimizer.dynamic_scale if self.loss_scaling else 1.0
        norm = tf.linalg.global_norm(grads) / scale
        if self.loss_scaling:
            self.optimizer.apply(grads, variables)  # skips and halves the scale when not finite
        else:
            def apply():
                self.optimizer.apply(grads, variables)
                return tf.constant(True)
            tf.cond(finite, apply, lambda: tf.constant(False))
        self.grad_norm.update_state(tf.where(finite, norm, 0.0),
                                    sample_weight=tf.cast(finite, tf.float32))
        self.nonfinite_total.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
        self.nonfinite_consecutive.assign(
            tf.where(finite, tf.constant(0, tf.int64), self.nonfinite_consecutive + 1))

    def loss_scale(self) -> float:
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaling else 1.0
