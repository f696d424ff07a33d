"""The training clock: training.max_minutes counts the minutes of every process of a run (the
checkpoint keeps them), and training.lr_clock keeps the learning-rate schedule in pace with the
clock: it moves faster than the steps when, at the pace measured over the last updates, the
clock would end the run before the schedule. The trainer's clock is replaced by one that
advances two minutes a step, so every figure is exact.

    python -m pytest tests/test_training_clock.py -v
"""

import math
import os
import tempfile
import unittest
from types import SimpleNamespace
from unittest import mock

import tests.logical_devices  # noqa: F401  (first: configures the devices before TensorFlow)

import tensorflow as tf  # noqa: E402

from myxtts.config import ConfigError, TrainingConfig, XTTSConfig  # noqa: E402
from myxtts.errors import MyXTTSError  # noqa: E402
from myxtts.training import base, schedules  # noqa: E402
from myxtts.training.checkpoints import CheckpointStore  # noqa: E402
from myxtts.training.schedules import ScheduleClock, build_schedule  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402
from tests.trainer_probes import (TOKENIZER, batch, feeder_of, make_trainer,  # noqa: E402
                                  restored_global_state)
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

PEAK, FLOOR, DECAY = 1e-3, 0.1, 100
MINUTES_A_STEP = 2.0


def cosine(step):
    """The cosine schedule below (no warmup) at `step`."""
    progress = min(step, DECAY) / DECAY
    return PEAK * (FLOOR + (1 - FLOOR) * 0.5 * (1 + math.cos(math.pi * progress)))


class Pipeline:
    val_steps = 0

    def __init__(self):
        self.items = [batch(seed=i) for i in range(4)]

    def train_batches(self, epoch, device, skip_batches=0):
        return feeder_of(self.items[skip_batches:], device)


class ClockedFit:
    """fit() with a clock that moves MINUTES_A_STEP before every step; records the learning
    rate each step trains with."""

    def __init__(self, trainer):
        self.trainer, self.now, self.rates = trainer, 0.0, []
        run_step = trainer._run_step  # pylint: disable=protected-access

        def timed_step(b):
            self.now += MINUTES_A_STEP * 60.0
            self.rates.append(float(trainer.optimizer.learning_rate.numpy()))
            return run_step(b)

        trainer._run_step = timed_step  # pylint: disable=protected-access

    def __call__(self):
        with mock.patch.object(base, "time", SimpleNamespace(monotonic=lambda: self.now)):
            return self.trainer.fit(Pipeline())


def clocked_fit(directory, epochs):
    """20 minutes for 100 steps, the pace measured over 2 updates."""
    with mock.patch.object(schedules, "PACE_WINDOW", 2):
        trainer = make_trainer(directory, xla=False, lr_clock=True, learning_rate=PEAK,
                               min_lr_ratio=FLOOR, decay_steps=DECAY, max_minutes=20.0,
                               epochs=epochs)
    return ClockedFit(trainer)


class TrainingClockTest(unittest.TestCase):
    """At 2 minutes a step, 20 minutes end the run at step 10, not 100. A first fit ends with
    its epoch at step 4, a resumed one trains on until the clock ends it, a third finds the
    minutes spent."""

    @classmethod
    def setUpClass(cls):
        cls.enterClassContext(restored_global_state())
        run = os.path.join(cls.enterClassContext(tempfile.TemporaryDirectory()), "run")
        cls.fits = []
        for epochs in (1, 100, 100):
            fit = clocked_fit(run, epochs)
            cls.fits.append((fit, fit()))

    def test_the_schedule_keeps_pace_with_the_clock_across_a_resume(self):
        # The schedule's step each update trained at: the steps' own until the pace of 2 updates
        # is known, then the schedule's steps left over the steps the clock leaves (98 / 7,
        # 84 / 6, then after the resume, at 32 of 100, 68 / 3).
        positions = [0, 1, 2, 16, 30, 31, 32, 32 + 68 / 3, 32 + 2 * 68 / 3, 100]
        rates = self.fits[0][0].rates + self.fits[1][0].rates
        self.assertEqual(len(rates), len(positions))
        for rate, position in zip(rates, positions):
            self.assertAlmostEqual(rate, cosine(position), places=7)
        summaries = [[summary.step, summary.reason] for _, summary in self.fits]
        self.assertEqual(summaries, [[4, "epochs"], [10, "max_minutes"], [10, "max_minutes"]])

    def test_the_minutes_are_kept_in_the_checkpoint(self):
        self.assertEqual([float(fit.trainer.minutes_trained.numpy()) for fit, _ in self.fits],
                         [8.0, 20.0, 20.0])
        spent, summary = self.fits[2]
        self.assertEqual(spent.rates, [])
        self.assertEqual(os.path.basename(summary.checkpoint), "ckpt-10")
        self.assertEqual(float(spent.trainer.schedule_clock.position.numpy()), 100.0)


class PaceTest(unittest.TestCase):
    """ScheduleClock alone, over whole runs of up to 5000 steps in 57 minutes after a 4-minute
    start-up."""

    @staticmethod
    def positions(seconds_a_step, pauses=None):
        """The position after each update until the clock ends the run; `pauses` {step: extra
        seconds} stands for compiles of new shapes and validations."""
        clock = ScheduleClock(TrainingConfig(max_minutes=57.0, max_steps=5000))
        clock.start()
        out, seconds, step = [], 4 * 60.0, 0
        while seconds < 57 * 60.0 and step < 5000:
            step += 1
            seconds += seconds_a_step + (pauses or {}).get(step, 0.0)
            clock.advance(step, seconds / 60.0)
            out.append(float(clock.position.numpy()))
        return out

    # Compiles of three more bucket shapes in the first epoch, a 40-s validation every 1000 steps.
    PAUSES = {2: 20.0, 30: 20.0, 60: 20.0, **{n: 40.0 for n in range(1000, 5000, 1000)}}

    def test_where_the_steps_end_the_run_the_schedule_is_the_steps(self):
        # 0.4 s a step: 5000 steps in 37 minutes. The position never leads the steps, pauses
        # or not.
        for pauses in (None, self.PAUSES):
            positions = self.positions(0.4, pauses)
            self.assertEqual(len(positions), 5000)
            self.assertEqual(set(positions), {0.0})

    def test_where_the_clock_ends_it_the_schedule_ends_with_the_clock(self):
        # 1.25 s a step: the clock ends the run at step 2544.
        positions = self.positions(1.25)
        self.assertEqual(len(positions), 2544)
        self.assertEqual(set(positions[:100]), {0.0})  # the pace is not known yet
        self.assertEqual(positions[-1], 5000.0)
        self.assertTrue(all(b > a for a, b in zip(positions[100:], positions[101:-1])))
        # From step 101 on, each step moves it by the schedule's 4900 steps left over the 2443
        # steps the clock leaves then.
        self.assertAlmostEqual(positions[1271], 100 + 1172 * 4900 / 2443, delta=0.01)
        # With the pauses the run ends sooner, and the schedule with it.
        paused = self.positions(1.25, self.PAUSES)
        self.assertLess(len(paused), 2544)
        self.assertEqual(paused[-1], 5000.0)

    def test_the_clocked_schedule_stands_at_the_larger_of_step_and_position(self):
        clock = ScheduleClock(TrainingConfig(max_minutes=60.0, max_steps=1000))
        tc = TrainingConfig(learning_rate=PEAK, warmup_steps=0, decay_steps=DECAY,
                            min_lr_ratio=FLOOR)
        schedule = build_schedule(tc, clock)
        clock.position.assign(50.0)
        self.assertAlmostEqual(float(schedule(10)), cosine(50), places=8)
        self.assertAlmostEqual(float(schedule(80)), cosine(80), places=8)


class OlderCheckpointTest(unittest.TestCase):
    def test_a_checkpoint_without_the_minutes_restores_and_leaves_them_alone(self):
        with tempfile.TemporaryDirectory() as directory:
            step, weights = tf.Variable(7, dtype=tf.int64), tf.Variable([1.0, 2.0])
            CheckpointStore(directory, {"step": step, "weights": weights}, keep=2).save(7)
            minutes = tf.Variable(3.0, dtype=tf.float64)
            again = tf.Variable([0.0, 0.0])
            store = CheckpointStore(directory, {"step": tf.Variable(0, dtype=tf.int64),
                                                "weights": again, "minutes_trained": minutes},
                                    keep=2)
            self.assertEqual(store.restore_latest()[1], 7)
            self.assertEqual(again.numpy().tolist(), [1.0, 2.0])
            self.assertEqual(float(minutes.numpy()), 3.0)  # left as it was


class ConfigTest(unittest.TestCase):
    def refused(self, **training):
        config = XTTSConfig()
        for key, value in training.items():
            setattr(config.training, key, value)
        with self.assertRaises(ConfigError) as caught:
            config.validate()
        return str(caught.exception)

    def test_lr_clock_needs_a_clock_a_schedule_and_an_end(self):
        self.assertIn("set max_minutes", self.refused(lr_clock=True))
        self.assertIn("lr_schedule constant",
                      self.refused(lr_clock=True, max_minutes=5.0, lr_schedule="constant"))
        self.assertIn("training.max_steps",
                      self.refused(lr_clock=True, max_minutes=5.0, lr_schedule="noam"))

    def test_lr_clock_is_refused_on_several_workers(self):
        config = XTTSConfig()
        config.training.lr_clock, config.training.max_minutes = True, 5.0
        workers = SimpleNamespace(num_workers=2)  # what the trainer asks a Distribution
        with self.assertRaises(MyXTTSError) as caught:
            XTTSTrainer(config, tokenizer=TOKENIZER, distribution=workers)
        self.assertIn("each machine keeps its own clock", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
