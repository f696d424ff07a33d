"""Learning-rate schedules (serializable `keras.optimizers.schedules.LearningRateSchedule`s).

    cosine    linear warmup to the peak, then cosine decay to min_lr_ratio * peak
              (Keras' own CosineDecay with warmup_target)
    noam      the Transformer schedule, normalised so the peak is reached at warmup_steps
    constant  the peak learning rate from the first step

Schedules are evaluated at the optimizer's iteration count (applied updates; skipped non-finite
steps do not advance them). With training.lr_clock the schedule is wrapped in ClockedSchedule
and evaluated at the larger of that count and a ScheduleClock's position, which the trainer sets
from the minutes trained: the share of training.max_minutes trained, times the step where
training ends. A recipe that a slower machine ends by its clock then still goes through its
whole schedule.
"""

from __future__ import annotations

from typing import Optional

import keras
import tensorflow as tf
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


class ScheduleClock:
    """Where the clock puts the schedule: a float32 variable (create it on the model device,
    or in the strategy's scope) holding `minutes / max_minutes * end_step`, at most `end_step`.
    It is not checkpointed: the trainer sets it from the minutes trained, which are."""

    def __init__(self, tc: TrainingConfig):
        self.max_minutes = float(tc.max_minutes)
        self.end_step = float(tc.max_steps or tc.warmup_steps + tc.decay_steps)
        self.position = tf.Variable(0.0, dtype=tf.float32, trainable=False,
                                    name="schedule_clock")

    def set(self, minutes_trained: float) -> None:
        self.position.assign(min(minutes_trained / self.max_minutes, 1.0) * self.end_step)


class ClockedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """`schedule` evaluated at max(step, the clock's position) (training.lr_clock)."""

    def __init__(self, schedule, position: tf.Variable):
        self.schedule = schedule
        self.position = position

    def __call__(self, step):
        return self.schedule(ops.maximum(ops.cast(step, "float32"), self.position))


def build_schedule(tc: TrainingConfig, clock: Optional[ScheduleClock] = None):
    """The learning rate (schedule or float) for training.lr_schedule; with `clock`
    (training.lr_clock) the schedule also advances by the clock."""
    if tc.lr_schedule == "cosine":
        schedule = keras.optimizers.schedules.CosineDecay(
            initial_learning_rate=0.0, decay_steps=max(1, tc.decay_steps),
            alpha=tc.min_lr_ratio, warmup_target=tc.learning_rate,
            warmup_steps=tc.warmup_steps)
    elif tc.lr_schedule == "noam":
        schedule = NoamSchedule(tc.learning_rate, tc.warmup_steps)
    else:
        return float(tc.learning_rate)
    return ClockedSchedule(schedule, clock.position) if clock is not None else schedule
