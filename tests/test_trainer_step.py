"""The compiled training step on the model device (fresh processes, two logical CPUs):
placement of everything the trainer owns, gradient accumulation equal to one big batch,
non-finite steps skipped and counted (and a streak latching the stop flag), frames counted on
the device, the fit loop's host-side step counting, float16 and bfloat16 steps, Muon, weight-decay
exclusions, learning-rate schedules, the auto precision choice, update scales.

    python -m pytest tests/test_trainer_step.py -v
"""

import unittest

import numpy as np

from tests.device_harness import run_probe
from tests.trainer_probes import SETUP

XLA_PROBE = SETUP + """
trainer = make_trainer(os.path.join(workdir, "fp32"), xla=True, grad_accum_steps=2)
b = batch()
first = trainer.step(b)
second = trainer.step(b)
out["batch_device"] = b["mel"].device
out["output_devices"] = sorted({v.device.split("/")[-1] for v in second.values()})
out["updated"] = [bool(first["updated"]), bool(second["updated"])]
out["model"] = devices_of(trainer.model.variables)
out["optimizer"] = devices_of(trainer.optimizer.variables)
out["n_optimizer"] = len(trainer.optimizer.variables)
out["n_trainable"] = len(trainer.model.trainable_variables)
out["accumulators"] = devices_of(trainer.step.accumulators)
out["n_accumulators"] = len(trainer.step.accumulators)
out["counters"] = devices_of([trainer.step.step, trainer.step.nonfinite_total, trainer.epoch,
                              trainer.batch_in_epoch, trainer.best_val_loss, trainer.frames,
                              trainer.step.stopped_at])
out["metrics"] = devices_of([v for m in [*trainer.step.loss_metrics.values(),
                                         trainer.step.grad_norm, *trainer.val_metrics.values()]
                             for v in m.variables])
out["iterations"] = int(trainer.optimizer.iterations.numpy())
out["step"] = trainer.global_step

for policy in ("mixed_float16", "mixed_bfloat16"):
    t = make_trainer(os.path.join(workdir, policy), xla=False, precision=policy)
    r = t.step(batch())
    good = {"loss": float(r["total"]), "finite": bool(r["finite"]),
            "loss_scale": t.step.loss_scale(), "policy": t.precision.policy,
            "loss_scaling": t.precision.loss_scaling,
            "compute_dtype": t.model.dtype_policy.compute_dtype,
            "optimizer": type(t.optimizer).__name__,
            "optimizer_devices": devices_of(t.optimizer.variables)}
    bad = t.step(batch(nan=True))
    good["nan_finite"] = bool(bad["finite"])
    good["loss_scale_after_nan"] = t.step.loss_scale()
    good["nonfinite_total"] = int(t.step.nonfinite_total.numpy())
    out[policy] = good
print(json.dumps(out))
"""

ACCUMULATION_PROBE = SETUP + """
big = make_trainer(os.path.join(workdir, "big"), xla=False, clip_norm=0.5)
accum = make_trainer(os.path.join(workdir, "accum"), xla=False, clip_norm=0.5,
                     grad_accum_steps=4)
accum.model.set_weights(big.model.get_weights())
initial = [w.copy() for w in big.model.get_weights()]
batches = [batch(size=8, seed=s) for s in range(3)]
norms = {"big": [], "accum": []}
for b in batches:
    big.step.reset_metrics(); accum.step.reset_metrics()
    big.step(b)
    norms["big"].append(big.step.metric_results()["grad_norm"])
    for micro in split(b, 4):
        accum.step(micro)
    norms["accum"].append(accum.step.metric_results()["grad_norm"])
diffs = [float(np.max(np.abs(a - c))) for a, c in zip(big.model.get_weights(),
                                                        accum.model.get_weights())]
moved = [float(np.max(np.abs(a - c))) for a, c in zip(big.model.get_weights(), initial)]
out["max_weight_diff"] = max(diffs)
out["max_weight_moved"] = max(moved)
out["norms"] = norms
out["steps"] = [big.global_step, accum.global_step]
out["iterations"] = [int(big.optimizer.iterations.numpy()), int(accum.optimizer.iterations.numpy())]

# Non-finite gradients (fp32, no loss scaling): skipped, counted, weights untouched.
before = [w.copy() for w in big.model.get_weights()]
r = big.step(batch(size=8, nan=True))
out["nan"] = {"finite": bool(r["finite"]), "consecutive": int(r["consecutive_nonfinite"]),
              "total": int(big.step.nonfinite_total.numpy()),
              "unchanged": all(np.array_equal(a, b) for a, b in zip(before, big.model.get_weights())),
              "step": big.global_step, "iterations": int(big.optimizer.iterations.numpy())}
big.step(batch(size=8, nan=True))
r = big.step(batch(size=8, seed=7))
out["after_recovery"] = {"finite": bool(r["finite"]), "consecutive": int(r["consecutive_nonfinite"]),
                         "total": int(big.step.nonfinite_total.numpy()), "stop": bool(r["stop"])}
# 3 + 3 batches of 8 x 24 frames, 3 x 8 x 24 micro-batch frames, 3 NaN/finite batches of 8 x 24
out["frames"] = [int(big.frames.numpy()), int(accum.frames.numpy())]

# A streak of max_nonfinite_steps latches `stop` on the device; a finite step does not undo it.
streak = make_trainer(os.path.join(workdir, "streak"), xla=False, max_nonfinite_steps=2)
flags = [bool(streak.step(batch(nan=nan))["stop"]) for nan in (True, False, True, True, False)]
out["streak"] = {"stop": flags, "stopped_at": int(streak.step.stopped_at.numpy())}

# Weight decay: never on vectors (biases, norms) or embedding tables; on matrices.
opt = big.optimizer
out["decay"] = {"vectors": any(opt._use_weight_decay(v) for v in big.model.trainable_variables
                               if len(v.shape) <= 1),
                "embeddings": any(opt._use_weight_decay(v) for v in big.model.trainable_variables
                                  if "embedding" in v.path.lower()),
                "matrices": all(opt._use_weight_decay(v) for v in big.model.trainable_variables
                                if len(v.shape) == 2 and "embedding" not in v.path.lower())}

# Muon trains too (its AdamW branch takes vectors and embeddings).
muon = make_trainer(os.path.join(workdir, "muon"), xla=False, optimizer="muon")
r = muon.step(batch())
out["muon"] = {"optimizer": type(muon.optimizer).__name__, "finite": bool(r["finite"]),
               "loss": float(r["total"]), "devices": devices_of(muon.optimizer.variables)}

# Schedules: warmup then cosine to the floor; Noam peaks at warmup; both serialize.
import keras
from myxtts.config import TrainingConfig
from myxtts.training.schedules import build_schedule
from myxtts.training.precision import resolve_precision
tc = TrainingConfig(learning_rate=1e-3, warmup_steps=10, decay_steps=100, min_lr_ratio=0.1)
cosine = build_schedule(tc)
tc.lr_schedule = "noam"
noam = build_schedule(tc)
again = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(noam))
out["cosine"] = [float(cosine(s)) for s in (0, 5, 10, 60, 110, 500)]
out["noam"] = [float(noam(s)) for s in (0, 9, 39)] + [float(again(39))]
auto = resolve_precision("auto", plan.model_device)
out["auto_precision"] = [auto.policy, auto.loss_scaling, auto.reason]

# Update scales: a fraction of the optimizer's update per variable or per row (0 = kept).
from myxtts.training.step import TrainStep
def dense_update(scales):
    keras.utils.set_random_seed(3)
    with tf.device(plan.model_device):
        dense = keras.Sequential([keras.layers.Dense(2)])
        dense.build((None, 4))
        optimizer = keras.optimizers.AdamW(learning_rate=0.1)
        optimizer.build(dense.trainable_variables)
        rows = None if scales is None else [
            tf.constant([[0.0], [0.5], [1.0], [1.0]]), 0.25]
        step = TrainStep(dense, optimizer, lambda b, s, t: {
            "total": tf.reduce_mean(tf.square(dense(b["x"]) - 1.0))}, loss_names=("total",),
            model_device=plan.model_device, jit_compile=False, update_scales=rows)
    before = [w.copy() for w in dense.get_weights()]
    step({"x": tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4) / 10)})
    return [(a - b).tolist() for a, b in zip(dense.get_weights(), before)]
full, scaled = dense_update(None), dense_update(True)
out["update_scales"] = {"full": full, "scaled": scaled}
print(json.dumps(out))
"""


FIT_PROBE = SETUP + """
# fit() with 2 micro-batches per update, a log every 2 updates, 3 updates: the loop mirrors the
# step and micro-step counts on the host and reads the device only at log points.
from myxtts.training.monitoring import TrainingMonitor
trainer = make_trainer(os.path.join(workdir, "fit"), xla=False, grad_accum_steps=2,
                       log_every_steps=2, max_steps=3)
lengths = [24, 20, 16, 12]  # frames of each item of the batches (4 micro-batches per epoch)


class Pipeline:
    val_steps = 0

    def train_batches(self, epoch, device, skip_batches=0):
        return feeder_of([dict(batch(seed=i), mel_lengths=tf.fill([4], n))
                          for i, n in enumerate(lengths)][skip_batches:], device)


logged = []
log_train = TrainingMonitor.log_train
TrainingMonitor.log_train = lambda self, step, epoch, scalars: (
    logged.append([step, epoch, scalars["frames_per_second"], scalars["data_wait_fraction"]]),
    log_train(self, step, epoch, scalars))
summary = trainer.fit(Pipeline())
out["summary"] = [summary.step, summary.epoch, summary.reason]
out["losses"] = [summary.first_loss, summary.last_loss]
out["logged"] = logged
out["frames"] = int(trainer.frames.numpy())
out["position"] = [int(trainer.epoch.numpy()), int(trainer.batch_in_epoch.numpy()),
                   int(trainer.step.micro_step.numpy())]
out["checkpoint"] = os.path.basename(summary.checkpoint)
print(json.dumps(out))
"""


class FitLoopTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(FIT_PROBE)

    def test_host_counts_updates_of_accumulated_micro_batches(self):
        self.assertEqual(self.r["summary"], [3, 1, "max_steps"])
        # 6 micro-batches: the 4 of epoch 1 and the first 2 of epoch 2.
        self.assertEqual(self.r["position"], [1, 2, 6])
        self.assertEqual(self.r["checkpoint"], "ckpt-3")

    def test_frames_and_wait_are_read_at_the_log_point(self):
        self.assertEqual(self.r["frames"], 4 * (24 + 20 + 16 + 12 + 24 + 20))
        (step, epoch, frames_per_second, wait), = self.r["logged"]
        self.assertEqual((step, epoch), (2, 0))
        self.assertGreater(frames_per_second, 0.0)
        self.assertTrue(0.0 <= wait <= 1.0, wait)

    def test_first_and_last_loss_are_reported(self):
        first, last = self.r["losses"]
        self.assertTrue(0 < first < 100 and 0 < last < 100, (first, last))
        self.assertNotEqual(first, last)


class CompiledStepPlacementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(XLA_PROBE)

    def test_batch_comes_from_the_data_device(self):
        self.assertTrue(self.r["batch_device"].endswith("CPU:0"), self.r["batch_device"])

    def test_everything_the_trainer_owns_is_on_the_model_device(self):
        for key in ("model", "optimizer", "accumulators", "counters", "metrics"):
            self.assertEqual(self.r[key], ["device:CPU:1"], key)

    def test_optimizer_is_built_with_every_slot(self):
        # AdamW: iteration + learning rate + momentum and velocity per trainable variable.
        self.assertGreaterEqual(self.r["n_optimizer"], 2 * self.r["n_trainable"] + 1)
        self.assertEqual(self.r["n_accumulators"], self.r["n_trainable"])

    def test_xla_step_outputs_on_model_device_and_accumulates(self):
        self.assertEqual(self.r["output_devices"], ["device:CPU:1"])
        self.assertEqual(self.r["updated"], [False, True])
        self.assertEqual((self.r["step"], self.r["iterations"]), (1, 1))

    def test_float16_step_uses_loss_scaling_and_halves_scale_on_nan(self):
        r = self.r["mixed_float16"]
        self.assertEqual((r["policy"], r["compute_dtype"]), ("mixed_float16", "float16"))
        self.assertEqual(r["optimizer"], "LossScaleOptimizer")
        self.assertEqual(r["optimizer_devices"], ["device:CPU:1"])
        self.assertTrue(r["finite"])
        self.assertTrue(0 < r["loss"] < 100, r["loss"])
        self.assertFalse(r["nan_finite"])
        self.assertEqual(r["loss_scale_after_nan"], r["loss_scale"] / 2)
        self.assertEqual(r["nonfinite_total"], 1)

    def test_bfloat16_step_without_loss_scaling(self):
        r = self.r["mixed_bfloat16"]
        self.assertEqual((r["policy"], r["compute_dtype"]), ("mixed_bfloat16", "bfloat16"))
        self.assertFalse(r["loss_scaling"])
        self.assertEqual(r["optimizer"], "AdamW")
        self.assertTrue(r["finite"])
        self.assertTrue(0 < r["loss"] < 100, r["loss"])
        self.assertFalse(r["nan_finite"])
        self.assertEqual(r["nonfinite_total"], 1)


class AccumulationAndNonFiniteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(ACCUMULATION_PROBE)

    def test_four_micro_batches_equal_one_big_batch(self):
        self.assertGreater(self.r["max_weight_moved"], 1e-3)  # training did change the weights
        self.assertLessEqual(self.r["max_weight_diff"], 1e-5)
        for a, b in zip(self.r["norms"]["big"], self.r["norms"]["accum"]):
            self.assertAlmostEqual(a, b, delta=1e-5 * max(1.0, a))
        self.assertEqual(self.r["steps"], [3, 3])
        self.assertEqual(self.r["iterations"], [3, 3])

    def test_nan_gradients_are_skipped_and_counted(self):
        nan = self.r["nan"]
        self.assertFalse(nan["finite"])
        self.assertEqual((nan["consecutive"], nan["total"]), (1, 1))
        self.assertTrue(nan["unchanged"])
        self.assertEqual((nan["step"], nan["iterations"]), (4, 3))  # counted, not applied

    def test_weight_decay_skips_vectors_and_embeddings(self):
        self.assertEqual(self.r["decay"], {"vectors": False, "embeddings": False,
                                           "matrices": True})

    def test_muon_step(self):
        r = self.r["muon"]
        self.assertEqual(r["optimizer"], "Muon")
        self.assertTrue(r["finite"])
        self.assertTrue(0 < r["loss"] < 100, r["loss"])
        self.assertEqual(r["devices"], ["device:CPU:1"])

    def test_schedules(self):
        c = self.r["cosine"]
        self.assertEqual(c[0], 0.0)
        self.assertAlmostEqual(c[1], 5e-4, places=7)   # half way through warmup
        self.assertAlmostEqual(c[2], 1e-3, places=7)   # peak
        self.assertAlmostEqual(c[4], 1e-4, places=7)   # floor = min_lr_ratio * peak
        self.assertAlmostEqual(c[5], 1e-4, places=7)
        n = self.r["noam"]
        self.assertAlmostEqual(n[1], 1e-3, places=7)   # peak at step warmup (counted from 1)
        self.assertAlmostEqual(n[2], 1e-3 * 0.5, places=7)
        self.assertEqual(n[2], n[3])                   # survives serialize/deserialize

    def test_auto_precision_on_cpu_is_float32_with_a_reason(self):
        policy, scaling, reason = self.r["auto_precision"]
        self.assertEqual((policy, scaling), ("float32", False))
        self.assertIn("no fp16 tensor cores", reason)

    def test_update_scales_give_a_fraction_of_the_update(self):
        full, scaled = (np.array(d[0]) for d in (self.r["update_scales"]["full"],
                                                  self.r["update_scales"]["scaled"]))
        self.assertGreater(np.abs(full).min(), 1e-3)
        self.assertTrue(np.all(scaled[0] == 0.0))  # row scale 0: unchanged, bit for bit
        np.testing.assert_allclose(scaled[1], 0.5 * full[1], rtol=1e-5)
        np.testing.assert_allclose(scaled[2:], full[2:], rtol=1e-5)
        bias_full, bias_scaled = (np.array(self.r["update_scales"][k][1])
                                  for k in ("full", "scaled"))
        np.testing.assert_allclose(bias_scaled, 0.25 * bias_full, rtol=1e-5)

    def test_a_finite_step_resets_the_consecutive_count(self):
        r = self.r["after_recovery"]
        self.assertTrue(r["finite"])
        self.assertEqual((r["consecutive"], r["total"]), (0, 2))
        self.assertFalse(r["stop"])  # 2 < the default training.max_nonfinite_steps

    def test_true_frames_are_summed_on_the_device(self):
        # big: 3 batches + 2 NaN + 1 finite, 8 items of 24 frames; accum: the same 3 batches.
        self.assertEqual(self.r["frames"], [6 * 8 * 24, 3 * 8 * 24])

    def test_a_nonfinite_streak_latches_the_stop_flag(self):
        r = self.r["streak"]
        self.assertEqual(r["stop"], [False, False, False, True, True])
        self.assertEqual(r["stopped_at"], 4)


if __name__ == "__main__":
    unittest.main()
