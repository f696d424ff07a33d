"""Learning-rate schedules (serializable `keras.optimizers.schedules.LearningRateSchedule`s).

    cosine    linear warmup to the peak, then cosine decay to min_lr_ratio * peak
              (Keras' own CosineDecay with warmup_target)
    noam      the Transformer schedule, normalised so the peak is reached at warmup_steps
    constant  the peak learning rate from the first step

Schedules are evaluated at the optimizer's iteration count (applied updates; skipped non-finite
steps do not advance them). With training.lr_clock the schedule is wrapped in ClockedSchedule
and evaluated at the larger of that count and a ScheduleClock's position, which moves faster
than the steps when the clock would end the run before the schedule: a recipe that a slower
machine ends by training.max_minutes still goes through its whole schedule.
"""

from __future__ import annotations

import collections
import statistics
from typing import Deque, Optional

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


# Updates whose median duration is ScheduleClock's pace (the median, so that compiles of new
# shapes and validation pauses do not count; start-up comes before the first update).
PACE_WINDOW = 100


class ScheduleClock:
    """The schedule's position for training.lr_clock: a float32 variable (create it on the model
    device, or in the strategy's scope; it is checkpointed) that the trainer moves after every
    update by `advance`. When, at the median duration of the last PACE_WINDOW updates, the steps
    left before max_minutes are fewer than the schedule's steps left before `end_step`
    (max_steps, else the end of the cosine decay), an update moves it by the schedule's steps
    left over those steps; once ahead of the steps it moves at least one step an update. Where
    the steps end the run first it stays behind them (0), and the schedule reads the steps
    alone."""

    def __init__(self, tc: TrainingConfig):
        self.max_minutes = float(tc.max_minutes)
        self.end_step = float(tc.max_steps or tc.warmup_steps + tc.decay_steps)
        self.position = tf.Variable(0.0, dtype=tf.float32, trainable=False,
                                    name="schedule_position")
        self._minutes: Deque[float] = collections.deque(maxlen=PACE_WINDOW + 1)
        self._value = 0.0

    def start(self) -> float:
        """At the start of a fit: the (restored) position; the pace is measured afresh."""
        self._value = float(self.position.numpy())
        self._minutes.clear()
        return self._value

    def advance(self, step: int, minutes: float) -> None:
        """After update `step` (1, 2, ...), `minutes` into the run."""
        self._minutes.append(minutes)
        here = max(self._value, step - 1.0)
        moves = 1.0
        if len(self._minutes) == self._minutes.maxlen:
            marks = list(self._minutes)
            per_step = statistics.median(b - a for a, b in zip(marks, marks[1:]))
            if per_step > 0:
                steps_left = (self.max_minutes - minutes) / per_step
                schedule_left = self.end_step - here
                if steps_left < schedule_left:
                    moves = schedule_left / max(steps_left, 1.0)
        if moves > 1.0 or self._value > step - 1.0:  # else the steps lead: left as it is
            self._value = min(self.end_step, here + moves)
            self.position.assign(self._value)


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
