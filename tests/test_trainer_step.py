"""The compiled training step on the model device (two logical CPUs, configured once for the test
run by tests/logical_devices.py): placement of everything the trainer owns, gradient
accumulation equal to one big batch, non-finite steps skipped and counted (and a streak latching
the stop flag), frames counted on the device, the fit loop's host-side step counting, float16 and
bfloat16 steps, Muon, weight-decay exclusions, learning-rate schedules, the auto precision choice,
update scales, the reading probe.

    python -m pytest tests/test_trainer_step.py -v
"""

import os
import tempfile
import unittest
from unittest import mock

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import TrainingConfig  # noqa: E402
from myxtts.training.losses import reading_loss  # noqa: E402
from myxtts.training.monitoring import TrainingMonitor  # noqa: E402
from myxtts.training.precision import resolve_precision  # noqa: E402
from myxtts.training.schedules import build_schedule  # noqa: E402
from myxtts.training.step import TrainStep  # noqa: E402
from tests.trainer_probes import (batch, devices_of, feeder_of, make_trainer,  # noqa: E402
                                  restored_global_state, split)
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow


class TrainerTestCase(unittest.TestCase):
    """Trainers set process-wide state (dtype policy, seeds): each class and each test puts it
    back. A class's trainers checkpoint into its temporary `workdir`."""

    @classmethod
    def setUpClass(cls):
        cls.enterClassContext(restored_global_state())
        cls.workdir = cls.enterClassContext(tempfile.TemporaryDirectory())

    def setUp(self):
        self.enterContext(restored_global_state())


class FitLoopTest(TrainerTestCase):
    """fit() with 2 micro-batches per update, a log every 2 updates, 3 updates: the loop mirrors
    the step and micro-step counts on the host and reads the device only at log points."""

    LENGTHS = [24, 20, 16, 12]  # frames of each item of the batches (4 micro-batches per epoch)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.trainer = make_trainer(os.path.join(cls.workdir, "fit"), xla=False,
                                   grad_accum_steps=2, log_every_steps=2, max_steps=3)
        items = [dict(batch(seed=i), mel_lengths=tf.fill([4], n))
                 for i, n in enumerate(cls.LENGTHS)]

        class Pipeline:
            val_steps = 0

            def train_batches(self, epoch, device, skip_batches=0):
                return feeder_of(items[skip_batches:], device)

        cls.logged = []
        log_train = TrainingMonitor.log_train

        def recording_log_train(monitor, step, epoch, scalars):
            cls.logged.append((step, epoch, scalars["frames_per_second"],
                               scalars["data_wait_fraction"]))
            return log_train(monitor, step, epoch, scalars)

        with mock.patch.object(TrainingMonitor, "log_train", recording_log_train), \
                cls().assertLogs("myxtts.training", "INFO") as logs:
            cls.summary = cls.trainer.fit(Pipeline())
        cls.messages = [record.getMessage() for record in logs.records]

    def test_the_start_says_what_it_waits_for_and_step_lines_give_an_eta(self):
        waiting, first, ready = (next(i for i, m in enumerate(self.messages) if m.startswith(s))
                                 for s in ("Waiting for the first batch", "First batch after",
                                           "The training step is ready"))
        self.assertLess(waiting, first)
        self.assertLess(first, ready)
        self.assertIn("training from step 0 to step 3 (max_steps).", self.messages[ready])
        line, = [m for m in self.messages if m.startswith("step 2 (epoch 1)")]
        self.assertRegex(line, r"; ETA \d+s to step 3 \(max_steps\)$")

    def test_host_counts_updates_of_accumulated_micro_batches(self):
        self.assertEqual([self.summary.step, self.summary.epoch, self.summary.reason],
                         [3, 1, "max_steps"])
        # 6 micro-batches: the 4 of epoch 1 and the first 2 of epoch 2.
        position = [int(self.trainer.epoch.numpy()), int(self.trainer.batch_in_epoch.numpy()),
                    int(self.trainer.step.micro_step.numpy())]
        self.assertEqual(position, [1, 2, 6])
        self.assertEqual(os.path.basename(self.summary.checkpoint), "ckpt-3")

    def test_frames_and_wait_are_read_at_the_log_point(self):
        self.assertEqual(int(self.trainer.frames.numpy()), 4 * (24 + 20 + 16 + 12 + 24 + 20))
        (step, epoch, frames_per_second, wait), = self.logged
        self.assertEqual((step, epoch), (2, 0))
        self.assertGreater(frames_per_second, 0.0)
        self.assertTrue(0.0 <= wait <= 1.0, wait)

    def test_first_and_last_loss_are_reported(self):
        first, last = self.summary.first_loss, self.summary.last_loss
        self.assertTrue(0 < first < 100 and 0 < last < 100, (first, last))
        self.assertNotEqual(first, last)


class CompiledStepPlacementTest(TrainerTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.trainer = make_trainer(os.path.join(cls.workdir, "fp32"), xla=True,
                                   grad_accum_steps=2)
        cls.batch = batch()
        cls.first = cls.trainer.step(cls.batch)
        cls.second = cls.trainer.step(cls.batch)

    def mixed_precision_steps(self, policy):
        """A trainer under `policy`, its result on a batch and then on a batch with a NaN."""
        trainer = make_trainer(os.path.join(self.workdir, policy), xla=False, precision=policy)
        good = trainer.step(batch())
        loss_scale = trainer.step.loss_scale()
        bad = trainer.step(batch(nan=True))
        return trainer, good, loss_scale, bad

    def test_batch_comes_from_the_data_device(self):
        self.assertTrue(self.batch["mel"].device.endswith("CPU:0"), self.batch["mel"].device)

    def test_everything_the_trainer_owns_is_on_the_model_device(self):
        t = self.trainer
        owned = {
            "model": t.model.variables,
            "optimizer": t.optimizer.variables,
            "accumulators": t.step.accumulators,
            "counters": [t.step.step, t.step.nonfinite_total, t.epoch, t.batch_in_epoch,
                         t.best_val_loss, t.frames, t.step.stopped_at],
            "metrics": [v for m in [*t.step.loss_metrics.values(), t.step.grad_norm,
                                    *t.val_metrics.values()] for v in m.variables]}
        for key, variables in owned.items():
            self.assertEqual(devices_of(variables), ["device:CPU:1"], key)

    def test_optimizer_is_built_with_every_slot(self):
        # AdamW: iteration + learning rate + momentum and velocity per trainable variable.
        n_trainable = len(self.trainer.model.trainable_variables)
        self.assertGreaterEqual(len(self.trainer.optimizer.variables), 2 * n_trainable + 1)
        self.assertEqual(len(self.trainer.step.accumulators), n_trainable)

    def test_xla_step_outputs_on_model_device_and_accumulates(self):
        self.assertEqual(sorted({v.device.split("/")[-1] for v in self.second.values()}),
                         ["device:CPU:1"])
        self.assertEqual([bool(self.first["updated"]), bool(self.second["updated"])],
                         [False, True])
        self.assertEqual((self.trainer.global_step,
                          int(self.trainer.optimizer.iterations.numpy())), (1, 1))

    def test_float16_step_uses_loss_scaling_and_halves_scale_on_nan(self):
        t, good, loss_scale, bad = self.mixed_precision_steps("mixed_float16")
        self.assertEqual((t.precision.policy, t.model.dtype_policy.compute_dtype),
                         ("mixed_float16", "float16"))
        self.assertEqual(type(t.optimizer).__name__, "LossScaleOptimizer")
        self.assertEqual(devices_of(t.optimizer.variables), ["device:CPU:1"])
        self.assertTrue(bool(good["finite"]))
        self.assertTrue(0 < float(good["total"]) < 100, float(good["total"]))
        self.assertFalse(bool(bad["finite"]))
        self.assertEqual(t.step.loss_scale(), loss_scale / 2)
        self.assertEqual(int(t.step.nonfinite_total.numpy()), 1)

    def test_bfloat16_step_without_loss_scaling(self):
        t, good, _, bad = self.mixed_precision_steps("mixed_bfloat16")
        self.assertEqual((t.precision.policy, t.model.dtype_policy.compute_dtype),
                         ("mixed_bfloat16", "bfloat16"))
        self.assertFalse(t.precision.loss_scaling)
        self.assertEqual(type(t.optimizer).__name__, "FusedAdamW")
        self.assertTrue(bool(good["finite"]))
        self.assertTrue(0 < float(good["total"]) < 100, float(good["total"]))
        self.assertFalse(bool(bad["finite"]))
        self.assertEqual(int(t.step.nonfinite_total.numpy()), 1)


class AccumulationAndNonFiniteTest(TrainerTestCase):
    """One trainer steps on 3 big batches, another on the same batches as 4 micro-batches each;
    then the big one gets 2 NaN batches and a finite one."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        big = make_trainer(os.path.join(cls.workdir, "big"), xla=False, clip_norm=0.5)
        accum = make_trainer(os.path.join(cls.workdir, "accum"), xla=False, clip_norm=0.5,
                             grad_accum_steps=4)
        accum.model.set_weights(big.model.get_weights())
        cls.initial = [w.copy() for w in big.model.get_weights()]
        cls.norms = {"big": [], "accum": []}
        for b in [batch(size=8, seed=s) for s in range(3)]:
            big.step.reset_metrics()
            accum.step.reset_metrics()
            big.step(b)
            cls.norms["big"].append(big.step.metric_results()["grad_norm"])
            for micro in split(b, 4):
                accum.step(micro)
            cls.norms["accum"].append(accum.step.metric_results()["grad_norm"])
        cls.big_weights, cls.accum_weights = ([w.copy() for w in t.model.get_weights()]
                                              for t in (big, accum))
        cls.steps = [big.global_step, accum.global_step]
        cls.iterations = [int(big.optimizer.iterations.numpy()),
                          int(accum.optimizer.iterations.numpy())]

        # Non-finite gradients (fp32, no loss scaling): skipped, counted, weights untouched.
        cls.nan = big.step(batch(size=8, nan=True))
        cls.nan_total = int(big.step.nonfinite_total.numpy())
        cls.after_nan_weights = [w.copy() for w in big.model.get_weights()]
        cls.nan_step_iterations = (big.global_step, int(big.optimizer.iterations.numpy()))
        big.step(batch(size=8, nan=True))
        cls.recovery = big.step(batch(size=8, seed=7))
        cls.recovery_total = int(big.step.nonfinite_total.numpy())
        cls.big, cls.accum = big, accum

    def test_four_micro_batches_equal_one_big_batch(self):
        moved = max(float(np.max(np.abs(a - c))) for a, c in zip(self.big_weights, self.initial))
        diff = max(float(np.max(np.abs(a - c)))
                   for a, c in zip(self.big_weights, self.accum_weights))
        self.assertGreater(moved, 1e-3)  # training did change the weights
        self.assertLessEqual(diff, 1e-5)
        for a, b in zip(self.norms["big"], self.norms["accum"]):
            self.assertAlmostEqual(a, b, delta=1e-5 * max(1.0, a))
        self.assertEqual(self.steps, [3, 3])
        self.assertEqual(self.iterations, [3, 3])

    def test_nan_gradients_are_skipped_and_counted(self):
        self.assertFalse(bool(self.nan["finite"]))
        self.assertEqual((int(self.nan["consecutive_nonfinite"]), self.nan_total), (1, 1))
        self.assertTrue(all(np.array_equal(a, b)
                            for a, b in zip(self.big_weights, self.after_nan_weights)))
        self.assertEqual(self.nan_step_iterations, (4, 3))  # counted, not applied

    def test_a_finite_step_resets_the_consecutive_count(self):
        self.assertTrue(bool(self.recovery["finite"]))
        self.assertEqual((int(self.recovery["consecutive_nonfinite"]), self.recovery_total),
                         (0, 2))
        self.assertFalse(bool(self.recovery["stop"]))  # 2 < the default max_nonfinite_steps

    def test_true_frames_are_summed_on_the_device(self):
        # big: 3 batches + 2 NaN + 1 finite, 8 items of 24 frames; accum: the same 3 batches.
        self.assertEqual([int(self.big.frames.numpy()), int(self.accum.frames.numpy())],
                         [6 * 8 * 24, 3 * 8 * 24])

    def test_weight_decay_skips_vectors_and_embeddings(self):
        # pylint: disable=protected-access
        decays = self.big.optimizer._use_weight_decay
        variables = self.big.model.trainable_variables
        decay = {"vectors": any(decays(v) for v in variables if len(v.shape) <= 1),
                 "embeddings": any(decays(v) for v in variables
                                   if "embedding" in v.path.lower()),
                 "matrices": all(decays(v) for v in variables
                                 if len(v.shape) == 2 and "embedding" not in v.path.lower())}
        self.assertEqual(decay, {"vectors": False, "embeddings": False, "matrices": True})

    def test_a_nonfinite_streak_latches_the_stop_flag(self):
        # A streak of max_nonfinite_steps latches `stop` on the device; a finite step does not
        # undo it.
        streak = make_trainer(os.path.join(self.workdir, "streak"), xla=False,
                              max_nonfinite_steps=2)
        flags = [bool(streak.step(batch(nan=nan))["stop"])
                 for nan in (True, False, True, True, False)]
        self.assertEqual(flags, [False, False, False, True, True])
        self.assertEqual(int(streak.step.stopped_at.numpy()), 4)

    def test_muon_step(self):
        # Muon trains too (its AdamW branch takes vectors and embeddings).
        muon = make_trainer(os.path.join(self.workdir, "muon"), xla=False, optimizer="muon")
        r = muon.step(batch())
        self.assertEqual(type(muon.optimizer).__name__, "Muon")
        self.assertTrue(bool(r["finite"]))
        self.assertTrue(0 < float(r["total"]) < 100, float(r["total"]))
        self.assertEqual(devices_of(muon.optimizer.variables), ["device:CPU:1"])


class ReadingProbeTest(TrainerTestCase):
    def test_the_probe_learns_on_recordings_and_the_model_on_what_the_probe_hears(self):
        # model.reading_probe: the CTC loss on the recording reaches only the probe; the one
        # on the postnet output reaches the decoder and the postnet and never the probe's
        # weights; the compiled step trains the probe to read the batch's tokens.
        b = batch(size=4, frames=40)
        trainer = make_trainer(os.path.join(self.workdir, "reading"), {"reading_probe": True},
                               xla=False, guided_attention_weight=0.0)
        model = trainer.model
        parts = {"probe": model.reading_probe, "decoder": model.decoder,
                 "postnet": model.postnet}

        def gradient_norms(key):
            with tf.GradientTape() as tape:
                loss = trainer._losses(b, trainer.step.step, False)[key]
            variables = [v for part in parts.values() for v in part.trainable_variables]
            grads, norms, i = tape.gradient(loss, variables), {}, 0
            for name, part in parts.items():
                n = len(part.trainable_variables)
                norms[name] = sum(float(tf.norm(g)) for g in grads[i:i + n] if g is not None)
                i += n
            return float(loss), norms

        before, on_recording = gradient_norms("reading")
        _, on_output = gradient_norms("reading_output")
        self.assertGreater(on_recording["probe"], 0.0)
        self.assertEqual(on_recording["decoder"] + on_recording["postnet"], 0.0)
        self.assertEqual(on_output["probe"], 0.0)
        self.assertGreater(on_output["decoder"], 0.0)
        self.assertGreater(on_output["postnet"], 0.0)
        for _ in range(20):
            trainer.step(b)
        self.assertGreater(float(trainer.step.loss_metrics["reading_output"].result()), 0.0)
        after, _ = gradient_norms("reading")
        self.assertLess(after, 0.8 * before)
        # The trained probe is in the checkpoint, as every other weight: a fresh model restores it.
        prefix = tf.train.Checkpoint(model=model).write(os.path.join(self.workdir, "probe"))
        fresh = make_trainer(os.path.join(self.workdir, "reading_fresh"),
                             {"reading_probe": True}, xla=False).model
        tf.train.Checkpoint(model=fresh).read(prefix).assert_existing_objects_matched()
        self.assertEqual(len(fresh.reading_probe.weights), 8)
        for trained, restored in zip(model.reading_probe.weights, fresh.reading_probe.weights):
            np.testing.assert_array_equal(trained.numpy(), restored.numpy())

    def test_the_ctc_kernel_and_the_compiled_plain_ops_agree(self):
        # The CPU path (CTC kernel, sparse labels) and the XLA path (plain ops) give the same
        # loss; an item with fewer frames than its tokens need is read as far as they allow.
        rng = np.random.default_rng(0)
        logits = tf.constant(rng.normal(size=(3, 30, 12)), tf.float32)
        tokens = tf.constant(rng.integers(1, 12, (3, 8)), tf.int32)
        token_lengths, mel_lengths = tf.constant([8, 5, 8]), tf.constant([30, 20, 9])
        kernel = reading_loss(logits, tokens, token_lengths, mel_lengths, dense=False)
        compiled = tf.function(reading_loss, jit_compile=True)(
            logits, tokens, token_lengths, mel_lengths, dense=True)
        self.assertTrue(np.isfinite(float(kernel)))
        self.assertAlmostEqual(float(kernel), float(compiled), places=3)


class ScheduleAndPrecisionTest(unittest.TestCase):
    def test_schedules(self):
        # Warmup then cosine to the floor; Noam peaks at warmup; both serialize.
        tc = TrainingConfig(learning_rate=1e-3, warmup_steps=10, decay_steps=100,
                            min_lr_ratio=0.1)
        cosine = build_schedule(tc)
        tc.lr_schedule = "noam"
        noam = build_schedule(tc)
        again = keras.optimizers.schedules.deserialize(
            keras.optimizers.schedules.serialize(noam))
        c = [float(cosine(s)) for s in (0, 5, 10, 60, 110, 500)]
        self.assertEqual(c[0], 0.0)
        self.assertAlmostEqual(c[1], 5e-4, places=7)   # half way through warmup
        self.assertAlmostEqual(c[2], 1e-3, places=7)   # peak
        self.assertAlmostEqual(c[4], 1e-4, places=7)   # floor = min_lr_ratio * peak
        self.assertAlmostEqual(c[5], 1e-4, places=7)
        n = [float(noam(s)) for s in (0, 9, 39)] + [float(again(39))]
        self.assertAlmostEqual(n[1], 1e-3, places=7)   # peak at step warmup (counted from 1)
        self.assertAlmostEqual(n[2], 1e-3 * 0.5, places=7)
        self.assertEqual(n[2], n[3])                   # survives serialize/deserialize

    def test_auto_precision_on_cpu_is_float32_with_a_reason(self):
        auto = resolve_precision("auto", PLAN.model_device)
        self.assertEqual((auto.policy, auto.loss_scaling), ("float32", False))
        self.assertIn("no fp16 tensor cores", auto.reason)


class UpdateScalesTest(unittest.TestCase):
    """Update scales: a fraction of the optimizer's update per variable or per row (0 = kept)."""

    def setUp(self):
        self.enterContext(restored_global_state())

    @staticmethod
    def dense_update(row_scales):
        """The change of a Dense layer's (kernel, bias) after one AdamW step."""
        keras.utils.set_random_seed(3)
        with tf.device(PLAN.model_device):
            dense = keras.Sequential([keras.layers.Dense(2)])
            dense.build((None, 4))
            optimizer = keras.optimizers.AdamW(learning_rate=0.1)
            optimizer.build(dense.trainable_variables)
            step = TrainStep(dense, optimizer, lambda b, s, t: {
                "total": tf.reduce_mean(tf.square(dense(b["x"]) - 1.0))}, loss_names=("total",),
                model_device=PLAN.model_device, jit_compile=False, update_scales=row_scales)
        before = [w.copy() for w in dense.get_weights()]
        step({"x": tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10)})
        return [a - b for a, b in zip(dense.get_weights(), before)]

    def test_update_scales_give_a_fraction_of_the_update(self):
        full_kernel, bias_full = self.dense_update(None)
        scaled_kernel, bias_scaled = self.dense_update(
            [tf.constant([[0.0], [0.5], [1.0], [1.0]]), 0.25])
        self.assertGreater(np.abs(full_kernel).min(), 1e-3)
        self.assertTrue(np.all(scaled_kernel[0] == 0.0))  # row scale 0: unchanged, bit for bit
        np.testing.assert_allclose(scaled_kernel[1], 0.5 * full_kernel[1], rtol=1e-5)
        np.testing.assert_allclose(scaled_kernel[2:], full_kernel[2:], rtol=1e-5)
        np.testing.assert_allclose(bias_scaled, 0.25 * bias_full, rtol=1e-5)


if __name__ == "__main__":
    unittest.main()


class TrainerContractTest(unittest.TestCase):
    def test_a_trainer_missing_a_hook_cannot_be_created(self):
        from myxtts.training.base import Trainer  # pylint: disable=import-outside-toplevel
        from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel
        from myxtts.training.vocoder_trainer import VocoderTrainer  # pylint: disable=import-outside-toplevel

        class WithoutValidation(Trainer):  # every hook but validate
            global_step = property(lambda self: 0)
            _run_step = _micro_batches_done = _updates_after = _log = lambda self, *a: None
            _has_validation = _stop_if_nonfinite = _oom_message = lambda self, *a: None

        with self.assertRaisesRegex(TypeError, "validate"):
            WithoutValidation()
        self.assertFalse(XTTSTrainer.__abstractmethods__)
        self.assertFalse(VocoderTrainer.__abstractmethods__)
