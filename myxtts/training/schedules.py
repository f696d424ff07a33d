"""Learning-rate schedules (serializable `keras.optimizers.schedules.LearningRateSchedule`s).

    cosine    linear warmup to the peak, then cosine decay to min_lr_ratio * peak
              (Keras' own CosineDecay with warmup_target)
    noam      the Transformer schedule, normalised so the peak is reached at warmup_steps
    constant  the peak learning rate from the first step

Schedules are evaluated at the optimizer's iteration count (applied updates; skipped non-finite
steps do not advance them).
"""

from __future__ import annotations

import keras
from keras import ops

from myxtts.config import TrainingConfig


@keras.saving.register_keras_serializable(package="myxtts")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """peak * min(step / warmup, sqrt(warmup / step)) with step counted from 1.

    Keras has no Noam schedule; this is the one from "Attention Is All You Need", rescaled so the
    peak is `peak_learning_rate` instead of d_model**-0.5 * warmup**-0.5.
    """

    def __init__(self, peak_learning_rate: float, warmup_steps: int):
        self.peak_learning_rate = float(peak_learning_rate)
        self.warmup_steps = int(max(1, warmup_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        return self.peak_learning_rate * ops.minimum(step / warmup, ops.sqrt(warmup / step))

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps}


def build_schedule(tc: TrainingConfig):
    """The learning rate (schedule or float) for training.lr_schedule."""
    if tc.lr_schedule == "cosine":
        return keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.0, decay_steps=max(1, tc.decay_steps),
            alpha=tc.min_lr_ratio, warmup_target=tc.learning_rate,
            warmup_steps=tc.warmup_steps)
    if tc.lr_schedule == "noam":
        return NoamSchedule(tc.learning_rate, tc.warmup_steps)
    return float(tc.learning_rate)
