"""The training clock: training.max_minutes counts the minutes of every process of a run (the
checkpoint keeps them), and training.lr_clock moves the learning-rate schedule by the share of
max_minutes trained when that is further along than the steps. The trainers' clock is replaced
by one that advances two minutes a step, so every figure is exact.

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
from myxtts.training import base  # noqa: E402
from myxtts.training.checkpoints import CheckpointStore  # noqa: E402
from myxtts.training.schedules import ScheduleClock, build_schedule  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402
from tests.trainer_probes import (TOKENIZER, batch, feeder_of, make_trainer,  # noqa: E402
                                  restored_global_state)

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


def clocked_trainer(directory, **training):
    return make_trainer(directory, xla=False, lr_clock=True, learning_rate=PEAK,
                        min_lr_ratio=FLOOR, decay_steps=DECAY, epochs=100, **training)


class TrainingClockTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.enterClassContext(restored_global_state())
        workdir = cls.enterClassContext(tempfile.TemporaryDirectory())
        run = os.path.join(workdir, "run")
        # 10 minutes for 100 steps: the clock, at 2 minutes a step, ends the run at step 5.
        first = ClockedFit(clocked_trainer(run, max_minutes=10.0, max_steps=100))
        cls.first = first, first()
        # Resumed with the same limit: the minutes are spent.
        spent = ClockedFit(clocked_trainer(run, max_minutes=10.0, max_steps=100))
        cls.spent = spent, spent()
        # Resumed with twice the minutes: half of them are trained.
        more = ClockedFit(clocked_trainer(run, max_minutes=20.0, max_steps=100))
        cls.more = more, more()

    def test_the_clock_ends_the_run_and_the_schedule_with_it(self):
        fit, summary = self.first
        self.assertEqual([summary.step, summary.reason], [5, "max_minutes"])
        # Step k trains at the position the clock had after step k-1: 20 steps a step.
        self.assertEqual(len(fit.rates), 5)
        for k, rate in enumerate(fit.rates):
            self.assertAlmostEqual(rate, cosine(20 * k), places=8)
        self.assertEqual(float(fit.trainer.schedule_clock.position.numpy()), 100.0)
        self.assertAlmostEqual(float(fit.trainer.optimizer.learning_rate.numpy()),
                               PEAK * FLOOR, places=8)

    def test_the_minutes_are_kept_in_the_checkpoint(self):
        self.assertEqual(float(self.first[0].trainer.minutes_trained.numpy()), 10.0)
        fit, summary = self.spent
        self.assertEqual([summary.step, summary.reason, os.path.basename(summary.checkpoint)],
                         [5, "max_minutes", "ckpt-5"])
        self.assertEqual(fit.rates, [])

    def test_more_minutes_go_on_from_where_the_clock_stood(self):
        fit, summary = self.more
        self.assertEqual([summary.step, summary.reason], [10, "max_minutes"])
        self.assertEqual(float(fit.trainer.minutes_trained.numpy()), 20.0)
        # 10 of 20 minutes put the schedule at step 50; then 10 steps a step.
        for k, rate in enumerate(fit.rates):
            self.assertAlmostEqual(rate, cosine(50 + 10 * k), places=8)

    def test_the_steps_lead_where_they_are_further_along(self):
        clock = ScheduleClock(TrainingConfig(max_minutes=60.0, max_steps=1000))
        tc = TrainingConfig(learning_rate=PEAK, warmup_steps=0, decay_steps=DECAY,
                            min_lr_ratio=FLOOR)
        schedule = build_schedule(tc, clock)
        clock.set(3.0)   # the clock's position: step 50
        self.assertAlmostEqual(float(schedule(10)), cosine(50), places=8)
        self.assertAlmostEqual(float(schedule(80)), cosine(80), places=8)
        clock.set(600.0)  # past max_minutes: the end, not beyond
        self.assertEqual(float(clock.position.numpy()), 1000.0)


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
