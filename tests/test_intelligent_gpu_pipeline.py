"""Device plans for every flag combination, early configuration, and the CLI self-check.

    python -m unittest tests.test_intelligent_gpu_pipeline -v
"""

import os
import unittest
from unittest import mock

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

from myxtts.devices import (DeviceConfigurationError, GpuInfo, configure,  # noqa: E402
                            plan_devices)
from tests.device_harness import run_cli  # noqa: E402

TWO = [GpuInfo(0, "RTX A", 24000), GpuInfo(1, "RTX B", 24000)]
FOUR = TWO + [GpuInfo(2, "RTX C", 12000), GpuInfo(3, "RTX D", 12000)]


class PlanTest(unittest.TestCase):
    def test_two_gpus_remapped_data_first(self):
        plan = plan_devices(2, 3, FOUR, use_env=False)
        self.assertEqual((plan.mode, plan.data_device, plan.model_device), ("dual", "/GPU:0", "/GPU:1"))
        self.assertEqual((plan.physical_data_gpu, plan.physical_model_gpu), (2, 3))
        self.assertIn("physical 2", plan.mapping_line())

    def test_reversed_order_still_puts_data_on_gpu0(self):
        plan = plan_devices(1, 0, TWO, use_env=False)
        self.assertEqual((plan.data_device, plan.physical_data_gpu), ("/GPU:0", 1))
        self.assertEqual((plan.model_device, plan.physical_model_gpu), ("/GPU:1", 0))

    def test_same_gpu_is_single_mode(self):
        plan = plan_devices(1, 1, TWO, use_env=False)
        self.assertEqual((plan.mode, plan.data_device, plan.model_device), ("single", "/GPU:0", "/GPU:0"))
        self.assertIn("single-GPU", plan.mapping_line())

    def test_same_gpu_split_into_two_logical_gpus(self):
        plan = plan_devices(0, 0, TWO, split_gpu=True, use_env=False)
        self.assertEqual((plan.mode, plan.data_device, plan.model_device), ("split", "/GPU:0", "/GPU:1"))
        self.assertEqual(plan.data_memory_mb, 6000)
        self.assertLess(plan.data_memory_mb + plan.model_memory_mb, 24000)

    def test_split_of_two_different_gpus_is_an_error(self):
        with self.assertRaisesRegex(DeviceConfigurationError, "--split-gpu"):
            plan_devices(0, 1, TWO, split_gpu=True, use_env=False)

    def test_no_ids_on_gpu_machine_uses_gpu0_for_both(self):
        plan = plan_devices(None, None, TWO, use_env=False)
        self.assertEqual((plan.mode, plan.physical_model_gpu), ("single", 0))

    def test_no_gpu_gives_two_logical_cpus(self):
        plan = plan_devices(0, 1, [], use_env=False)
        self.assertEqual((plan.mode, plan.data_device, plan.model_device), ("cpu", "/CPU:0", "/CPU:1"))

    def test_require_gpu_without_gpu_is_an_error(self):
        with self.assertRaisesRegex(DeviceConfigurationError, "--require-gpu"):
            plan_devices(0, 1, [], require_gpu=True, use_env=False)

    def test_invalid_id_lists_gpus_found(self):
        with self.assertRaises(DeviceConfigurationError) as ctx:
            plan_devices(0, 5, TWO, use_env=False)
        msg = str(ctx.exception)
        self.assertIn("--model-gpu 5", msg)
        self.assertIn("GPU 0 (RTX A", msg)
        self.assertIn("GPU 1 (RTX B", msg)

    def test_negative_id_is_an_error(self):
        with self.assertRaisesRegex(DeviceConfigurationError, "--data-gpu -1"):
            plan_devices(-1, 1, TWO, use_env=False)

    def test_nonpositive_memory_limit_is_an_error(self):
        with self.assertRaisesRegex(DeviceConfigurationError, "--model-gpu-memory"):
            plan_devices(0, 1, TWO, model_memory_mb=0, use_env=False)

    def test_env_overrides_and_flags_win(self):
        with mock.patch.dict(os.environ, {"MYXTTS_DATA_GPU": "2", "MYXTTS_MODEL_GPU": "3"}):
            plan = plan_devices(None, None, FOUR)
            self.assertEqual((plan.physical_data_gpu, plan.physical_model_gpu), (2, 3))
            plan = plan_devices(None, 1, FOUR)
            self.assertEqual((plan.physical_data_gpu, plan.physical_model_gpu), (2, 1))

    def test_bad_env_value_is_an_error(self):
        with mock.patch.dict(os.environ, {"MYXTTS_MODEL_GPU": "one"}):
            with self.assertRaisesRegex(DeviceConfigurationError, "MYXTTS_MODEL_GPU"):
                plan_devices(None, None, TWO)


class EarlyConfigurationTest(unittest.TestCase):
    def test_configuring_after_tensorflow_initialised_is_a_clear_error(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.constant(1.0)  # initialises the runtime (if no earlier test did)
        with mock.patch.dict(os.environ), self.assertRaises(DeviceConfigurationError) as ctx:
            configure(plan_devices(0, 1, gpus=[], use_env=False))
        self.assertIn("already initialised", str(ctx.exception))
        self.assertIn("configure()", str(ctx.exception))

    def test_configure_gives_two_logical_cpus_and_data_prefetch_lands_on_cpu0(self):
        # The test run's devices (tests/logical_devices.py) were configured by
        # myxtts.devices.configure before TensorFlow initialised.
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        ds = tf.data.Dataset.range(6).map(lambda i: tf.fill([3], tf.cast(i, tf.float32)))
        ds = ds.batch(2).apply(tf.data.experimental.prefetch_to_device(PLAN.data_device,
                                                                       buffer_size=2))
        batch = next(iter(ds))
        with tf.device(PLAN.model_device):
            handed = tf.identity(batch)
        self.assertEqual(len(tf.config.list_logical_devices("CPU")), 2)
        self.assertTrue(batch.device.endswith("CPU:0"), batch.device)
        self.assertTrue(handed.device.endswith("CPU:1"), handed.device)


class DeviceCheckCliTest(unittest.TestCase):
    def test_device_check_on_cpu_warns_and_prints_placements(self):
        proc = run_cli(["--device-check", "--data-gpu", "0", "--model-gpu", "1"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("WARNING", proc.stderr)
        self.assertIn("two logical CPU devices", proc.stderr)
        self.assertIn("data → /CPU:0, model → /CPU:1", proc.stderr)
        self.assertRegex(proc.stdout, r"tensor on data device:\s+\S+CPU:0")
        self.assertRegex(proc.stdout, r"copied to model device:\s+\S+CPU:1")
        self.assertIn("self-check: OK", proc.stdout)

    def test_invalid_gpu_exits_nonzero_with_one_paragraph_and_no_traceback(self):
        proc = run_cli(["--device-check", "--model-gpu", "7"])
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--model-gpu 7", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)

    def test_require_gpu_on_cpu_machine_fails_clearly(self):
        proc = run_cli(["--device-check", "--require-gpu"])
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--require-gpu", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
    unittest.main()
