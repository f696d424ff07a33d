"""The adversarial mel loss (training.adversarial_weight; myxtts/training/adversarial_mel.py) on
two logical CPUs: its discriminator and optimizer live on the model device, the discriminator
learns to tell recordings from the model's output inside the compiled step, its terms reach
the model only from training.adversarial_start_step, under float16 it keeps its own loss scale
and skips non-finite updates, a resumed run goes on with the same discriminator (and a run
begun without one is not resumed with one), and a strategy is refused.

    python -m pytest tests/test_adversarial_mel.py -v
"""

import os
import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.errors import MyXTTSError  # noqa: E402
from myxtts.training.adversarial_mel import judged_windows  # noqa: E402
from myxtts.training.checkpoints import CheckpointError  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402
from tests.test_trainer_step import TrainerTestCase  # noqa: E402
from tests.trainer_probes import batch, devices_of, make_trainer  # noqa: E402
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

ON = dict(xla=False, adversarial_weight=1.0, adversarial_start_step=0,
          discriminator_learning_rate=1e-3)


def _values(variables):
    return [v.numpy().copy() for v in variables]


class WindowTest(unittest.TestCase):
    def test_the_same_window_of_recording_and_output_inside_each_item(self):
        # Frame t of item b holds the value 1000 b + t, so a window says where it was cut.
        lengths = tf.constant([300, 129, 40])
        mel = tf.tile((1000.0 * tf.range(3.0)[:, None] + tf.range(300.0)[None, :])[..., None],
                      [1, 1, 2])
        real, fake, mask = judged_windows(mel, mel + 0.5, lengths, tf.constant(7, tf.int64),
                                          frames=128)
        self.assertEqual(real.shape, (3, 128, 2))
        np.testing.assert_array_equal(fake.numpy(), real.numpy() + 0.5)
        starts = real.numpy()[:, 0, 0] - 1000.0 * np.arange(3)
        for b, (start, length) in enumerate(zip(starts, [300, 129, 40])):
            valid = int(mask.numpy()[b].sum())
            self.assertEqual(valid, min(128, length))
            self.assertLessEqual(start + valid, length)  # inside the item
            np.testing.assert_array_equal(real.numpy()[b, :valid, 0],
                                          1000.0 * b + start + np.arange(valid))
        self.assertEqual(starts[2], 0)  # shorter than the window: all of it
        again = judged_windows(mel, mel, lengths, tf.constant(7, tf.int64), frames=128)[0]
        other = judged_windows(mel, mel, lengths, tf.constant(8, tf.int64), frames=128)[0]
        np.testing.assert_array_equal(again.numpy(), real.numpy())  # the step decides
        self.assertFalse(np.array_equal(other.numpy()[0], real.numpy()[0]))


class AdversarialMelTest(TrainerTestCase):
    def test_discriminator_and_its_optimizer_live_on_the_model_device(self):
        trainer = make_trainer(os.path.join(self.workdir, "placement"), **ON)
        adversary = trainer.adversary
        self.assertEqual(PLAN.model_device, "/CPU:1")
        self.assertEqual(devices_of(adversary.discriminator.variables), ["device:CPU:1"])
        self.assertEqual(devices_of(adversary.side.optimizer.variables), ["device:CPU:1"])
        self.assertIsNone(make_trainer(os.path.join(self.workdir, "off"), xla=False).adversary)

    def test_the_discriminator_learns_to_tell_recordings_from_an_averaged_output(self):
        # The output an L1 loss is least for where it cannot foresee the frames: their mean
        # over time. Fixed outputs, so only the judge learns.
        b = batch(size=4)
        trainer = make_trainer(os.path.join(self.workdir, "learns"), **ON)
        adversary, d_model = trainer.adversary, trainer.config.model.d_model
        with tf.device(PLAN.model_device):
            averaged = tf.broadcast_to(tf.reduce_mean(b["mel"], axis=1, keepdims=True),
                                       b["mel"].shape)
            outputs = {"mel_after": averaged,
                       "speaker_embedding": tf.one_hot(b["speaker"], d_model)}
            update = tf.function(lambda: adversary.losses(outputs, b, 0, True))
            judge = tf.function(lambda: adversary.losses(outputs, b, 0, False))
            before = judge()
            for _ in range(30):
                update()
            after = judge()
        self.assertGreater(float(before["discriminator"]), 0.4)  # about 0.5: no idea yet
        self.assertLess(float(after["discriminator"]), 0.1)
        # What the model is then asked for: that output is judged unlike a recording.
        self.assertGreater(float(after["adversarial"]), 0.8)
        self.assertEqual(int(adversary.side.optimizer.iterations.numpy()), 30)
        self.assertEqual(int(adversary.side.nonfinite_total.numpy()), 0)

    def test_validation_reports_its_terms_without_training_the_judge(self):
        trainer = make_trainer(os.path.join(self.workdir, "validation"), **ON)
        weights = _values(trainer.adversary.discriminator.variables)
        trainer._val_batch(batch(size=4))
        for name in ("adversarial", "feature_matching", "discriminator"):
            self.assertGreater(float(trainer.val_metrics[name].result()), 0.0, name)
        for got, want in zip(_values(trainer.adversary.discriminator.variables), weights):
            np.testing.assert_array_equal(got, want)

    def test_its_terms_reach_the_model_only_from_the_start_step(self):
        # The discriminator learns from the first step either way; before the start step the
        # model's update is the one without the loss, bit for bit.
        b = batch(size=4)
        off = make_trainer(os.path.join(self.workdir, "plain"), xla=False)
        later = make_trainer(os.path.join(self.workdir, "later"),
                             **dict(ON, adversarial_start_step=3))
        for got, want in zip(_values(later.model.trainable_variables),
                             _values(off.model.trainable_variables)):
            np.testing.assert_array_equal(got, want)  # the same start
        for _ in range(3):
            off.step(b)
            later.step(b)
        for got, want in zip(_values(later.model.trainable_variables),
                             _values(off.model.trainable_variables)):
            np.testing.assert_array_equal(got, want)
        off.step(b)
        later.step(b)
        changed = [not np.array_equal(got, want) for got, want in zip(
            _values(later.model.postnet.trainable_variables),
            _values(off.model.postnet.trainable_variables))]
        self.assertTrue(all(changed))

    def test_a_resumed_run_goes_on_with_the_same_discriminator(self):
        b = batch(size=4)
        directory = os.path.join(self.workdir, "resume")
        trainer = make_trainer(directory, **ON)
        for _ in range(3):
            trainer.step(b)
        trainer._save()
        saved = _values(trainer.adversary.discriminator.variables)
        saved_slots = _values(trainer.adversary.side.optimizer.variables)
        resumed = make_trainer(directory, **ON)
        self.assertEqual(resumed.global_step, 3)
        for got, want in zip(_values(resumed.adversary.discriminator.variables), saved):
            np.testing.assert_array_equal(got, want)
        for got, want in zip(_values(resumed.adversary.side.optimizer.variables), saved_slots):
            np.testing.assert_array_equal(got, want)

    def test_under_float16_the_discriminator_has_its_own_loss_scale_and_skips_nan(self):
        trainer = make_trainer(os.path.join(self.workdir, "float16"), precision="mixed_float16",
                               **ON)
        side = trainer.adversary.side
        self.assertEqual(trainer.adversary.discriminator.dtype_policy.compute_dtype, "float16")
        self.assertEqual(type(side.optimizer).__name__, "LossScaleOptimizer")
        self.assertIsNot(side.optimizer, trainer.optimizer)
        self.assertEqual(devices_of(side.optimizer.variables), ["device:CPU:1"])
        self.assertTrue(bool(trainer.step(batch(size=4))["finite"]))
        scale, weights = side.loss_scale(), _values(trainer.adversary.discriminator.variables)
        trainer.step(batch(size=4, nan=True))  # a NaN in a recording: both updates skipped
        self.assertEqual(int(side.nonfinite_total.numpy()), 1)
        self.assertEqual(side.loss_scale(), scale / 2)
        for got, want in zip(_values(trainer.adversary.discriminator.variables), weights):
            np.testing.assert_array_equal(got, want)

    def test_a_run_without_a_discriminator_is_not_resumed_with_one(self):
        # Nothing saved is changed: the error says which setting differs and what to do.
        directory = os.path.join(self.workdir, "resume_mismatch")
        plain = make_trainer(directory, xla=False)
        plain.step(batch(size=4))
        plain._save()
        with self.assertRaisesRegex(CheckpointError, "training.adversarial_weight\\). To start "
                                                     "from scratch in the same directory, pass "
                                                     "--reset-training"):
            make_trainer(directory, **ON)
        self.assertEqual(make_trainer(directory, xla=False).global_step, 1)

    def test_a_strategy_is_refused_before_anything_is_built(self):
        trainer = make_trainer(os.path.join(self.workdir, "config"), **ON)
        with self.assertRaisesRegex(MyXTTSError, "training.adversarial_weight is set, but this "
                                                 "run trains on a tf.distribute strategy"):
            # The check comes before the strategy is used, so any strategy object will do.
            XTTSTrainer(trainer.config, distribution=tf.distribute.get_strategy())


if __name__ == "__main__":
    unittest.main()
