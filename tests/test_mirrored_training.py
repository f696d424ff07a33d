"""Several model devices on one machine (tf.distribute.MirroredStrategy), in a fresh process with
three logical CPU devices (tests/children/mirrored_training.py): data on /CPU:0, model replicas
on /CPU:1 and /CPU:2 — the plan of `--data-gpu 0 --model-gpus 1,2` on a machine without a GPU.

One mirrored update must equal the one-device update on the same global batch: the replicas'
losses are divided by the global batch's valid-frame counts, their gradients summed, and the
optimizer (clipping after unscaling, non-finite skipping, loss scale) runs once on the sum.
With Adam the first updates hardly depend on the gradient's scale, so the test compares more
than the weights: the loss, the (unscaled, unclipped) gradient norm and the optimizer's moment
slots, which a gradient off by a factor would change.

Device plans and flag errors (no TensorFlow) are tested at the end.

    python -m pytest tests/test_mirrored_training.py -v
"""

import os
import subprocess
import sys
import unittest

from myxtts import devices
from tests import children
from tests.device_harness import REPO
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

BOTH = [["device:CPU:1", "device:CPU:2"]]


class MirroredUpdateTest(unittest.TestCase):
    """One MirroredStrategy update over /CPU:1 and /CPU:2 vs the one-device update (1e-5)."""

    @classmethod
    def setUpClass(cls):
        cls.r = children.run_json("mirrored_training", timeout=600)

    def test_plan_data_on_cpu0_replicas_on_cpu1_and_cpu2(self):
        self.assertEqual(self.r["plan"], ["/CPU:0", "/CPU:1", "/CPU:2"])

    def test_everything_the_model_owns_is_mirrored_on_exactly_the_model_devices(self):
        for probe in (self.r["placement"], self.r["fp16_accum"]["placement"]):
            for name, devices_ in probe.items():
                if name != "accumulators" or devices_:  # fp32: no accumulation
                    self.assertEqual(devices_, BOTH, name)
        self.assertTrue(self.r["fp16_accum"]["placement"]["accumulators"])

    def test_fp32_update_equals_the_one_device_update(self):
        self.assertGreater(self.r["fp32_moved"], 1e-3)
        for step in self.r["fp32"]:
            single, mirrored = step["loss"]
            self.assertAlmostEqual(single, mirrored, delta=1e-5 * single)
            self.assertTrue(step["loss_device"].endswith("CPU:1"), step["loss_device"])
        single_norm, mirrored_norm = self.r["fp32_norms"]
        self.assertGreater(single_norm, 1.0)  # so clip_norm 1.0 clipped
        self.assertAlmostEqual(single_norm, mirrored_norm, delta=1e-5 * single_norm)
        self.assertLessEqual(self.r["fp32_diff"]["weights"], 1e-5)
        self.assertLessEqual(self.r["fp32_diff"]["optimizer"], 1e-5)
        # The second update ran at the learning rate the clock set, on both.
        for share in self.r["clock_lr"]:
            self.assertAlmostEqual(share, 0.5, places=6)

    def test_nan_in_one_replica_skips_the_update_everywhere(self):
        self.assertEqual(self.r["nan"]["finite"], [False, False])
        self.assertTrue(self.r["nan_unchanged"])
        self.assertEqual(self.r["nonfinite_total"], 1)

    def test_frames_of_the_global_batch_are_counted(self):
        self.assertEqual(self.r["frames"][0], self.r["frames"][1])
        self.assertEqual(self.r["frames"][0], 3 * (24 + 22 + 8 + 6))

    def test_mixed_float16_and_accumulation_as_on_one_device(self):
        """float16 activations are rounded by kernels whose blocking depends on the batch
        shape: fed a 2 + 2 split of a 4-item batch of unequal lengths (loss scale 2^10), the
        weights of the mirrored and the one-device update were 4.5e-4 apart and the optimizer
        slots 2.3e-6 (measured while this was built; the losses agreed to float32 precision),
        which is float16 rounding, not the distribution. So each
        replica here gets a slice of exactly the one-device micro-batch's shape and values (the
        global micro-batch is that batch twice: the same frame-weighted loss and gradient).
        Both start from the same loss scale, 2^10: the doubled global batch halves each
        replica's share of the loss, so a scale at which the one-device float16 backward pass
        just overflows (2^15 did here) need not overflow in the replicas (with a real split
        each item's gradient is the same as on one device, and so is overflow). Then the
        accumulation of 2 micro-batches, the unscaling, clipping and the fp32 master-weight
        update are held to the 1e-5 of the fp32 test, and a NaN skips the update and halves
        the scale on both."""
        r = self.r["fp16_accum"]
        self.assertEqual(r["optimizer"], "LossScaleOptimizer")
        self.assertEqual(r["loss_scale"], [2.0 ** 10, 2.0 ** 10])
        self.assertEqual(r["scale_after_nan"], [2.0 ** 9, 2.0 ** 9])
        self.assertEqual(r["nonfinite"], [1, 1])
        self.assertEqual(r["iterations"], [1, 1])
        for single, mirrored, single_updated, mirrored_updated in r["losses"]:
            self.assertAlmostEqual(single, mirrored, delta=1e-5 * single)
            self.assertEqual(single_updated, mirrored_updated)
        self.assertEqual([u for *_, u in r["losses"]], [False, True])
        self.assertLessEqual(r["diff"]["weights"], 1e-5)
        self.assertLessEqual(r["diff"]["optimizer"], 1e-5)


class DevicePlanTest(unittest.TestCase):
    """Planning is pure Python: any GPU inventory, no TensorFlow."""

    GPUS = [devices.GpuInfo(i) for i in range(4)]

    def plan(self, **kwargs):
        return devices.plan_devices(use_env=False, **kwargs)

    def test_mirrored_plan_on_gpus(self):
        p = self.plan(data_gpu=0, model_gpus=[1, 2, 3], gpus=self.GPUS)
        self.assertEqual((p.strategy, p.data_device), ("mirrored", "/GPU:0"))
        self.assertEqual(p.model_devices, ("/GPU:1", "/GPU:2", "/GPU:3"))
        self.assertEqual(p.visible_gpus, [0, 1, 2, 3])

    def test_one_model_gpu_in_the_list_is_the_dual_plan(self):
        p = self.plan(data_gpu=0, model_gpus=[2], gpus=self.GPUS)
        self.assertEqual((p.mode, p.strategy, p.visible_gpus), ("dual", "none", [0, 2]))

    def test_without_gpu_one_logical_cpu_per_replica(self):
        p = self.plan(data_gpu=0, model_gpus=[1, 2], gpus=[])
        self.assertEqual((p.data_device, p.model_devices), ("/CPU:0", ("/CPU:1", "/CPU:2")))
        self.assertIn("3 logical CPU devices", p.mapping_line())

    def test_errors_name_the_flag(self):
        cases = [(dict(model_gpus=[1, 1]), "names a GPU twice"),
                 (dict(model_gpus=[1, 2], model_gpu=1), "--model-gpus 1,2 and --model-gpu 1"),
                 (dict(data_gpu=1, model_gpus=[1, 2]), "--data-gpu 1 is also in --model-gpus"),
                 (dict(model_gpus=[0, 1, 2, 3]), "none is left for the data device"),
                 (dict(model_gpus=[1, 7]), "--model-gpus: GPU 7 does not exist")]
        for kwargs, message in cases:
            with self.assertRaises(devices.DeviceConfigurationError) as e:
                self.plan(gpus=self.GPUS, **kwargs)
            self.assertIn(message, str(e.exception))
        with self.assertRaises(devices.DeviceConfigurationError) as e:
            devices.parse_gpu_list("1;2")
        self.assertIn("--model-gpus '1;2'", str(e.exception))

    def test_cli_reports_bad_device_flags_before_tensorflow(self):
        bad_tf_config = '{"cluster": {"worker": ["127.0.0.1:1"]}, "task": '
        for args, message in [(["--model-gpus", "1,1"], "--model-gpus 1,1 names a GPU twice"),
                              (["--model-gpus", "1,2", "--model-gpu", "1"], "both name"),
                              ([], "TF_CONFIG cannot be used")]:
            extra = {} if args else {"TF_CONFIG": bad_tf_config}
            proc = subprocess.run(
                [sys.executable, os.path.join(REPO, "train_main.py"), "--device-check",
                 "--config", "configs/tiny.yaml", *args],
                capture_output=True, text=True, timeout=120, cwd=REPO,
                env=dict(os.environ, CUDA_VISIBLE_DEVICES="", **extra))
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn(message, proc.stderr)
            self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
    unittest.main()
