"""Where things live on a data device and a model device (two logical CPUs, fresh process).

    python -m unittest tests.test_dual_gpu_device_placement -v
"""

import unittest

from tests.device_harness import run_probe

PLACEMENT_PROBE = """
import keras
from myxtts.devices import get_device_context
out = {"plan": [plan.data_device, plan.model_device]}

with get_device_context(plan.data_device):
    batch_x = tf.random.uniform([8, 16])
    batch_y = tf.random.uniform([8, 4])
out["batch"] = batch_x.device
with get_device_context():
    out["default"] = tf.constant(1.0).device

with get_device_context(plan.model_device):
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.LayerNormalization(), keras.layers.Dense(4)])
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    metric = keras.metrics.Mean()

    @tf.function(jit_compile=True)
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, model(x)

    x_m, y_m = tf.identity(batch_x), tf.identity(batch_y)
    loss, pred = step(x_m, y_m)
    metric.update_state(loss)
out["model_vars"] = [v.value.device for v in model.variables]
out["optimizer_vars"] = [v.value.device for v in optimizer.variables]
out["metric_vars"] = [v.value.device for v in metric.variables]
out["n_optimizer_vars"] = len(optimizer.variables)
out["handoff"] = x_m.device
out["loss"] = loss.device
out["pred"] = pred.device
out["iterations"] = int(optimizer.iterations.numpy())
print(json.dumps(out))
"""


class DualDevicePlacementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(PLACEMENT_PROBE)

    def test_plan_maps_data_to_cpu0_and_model_to_cpu1(self):
        self.assertEqual(self.r["plan"], ["/CPU:0", "/CPU:1"])

    def test_tensor_under_data_device_is_on_cpu0(self):
        self.assertTrue(self.r["batch"].endswith("CPU:0"), self.r["batch"])

    def test_default_device_context_is_cpu0_without_gpu(self):
        self.assertTrue(self.r["default"].endswith("CPU:0"), self.r["default"])

    def test_model_variables_on_model_device(self):
        self.assertTrue(self.r["model_vars"])
        for dev in self.r["model_vars"]:
            self.assertTrue(dev.endswith("CPU:1"), dev)

    def test_built_optimizer_slots_and_iterations_on_model_device(self):
        # iterations, learning rate, 2 slots per weight (6 weights)
        self.assertGreaterEqual(self.r["n_optimizer_vars"], 12)
        for dev in self.r["optimizer_vars"] + self.r["metric_vars"]:
            self.assertTrue(dev.endswith("CPU:1"), dev)

    def test_jit_step_consumes_data_device_batch_and_outputs_on_model_device(self):
        self.assertTrue(self.r["handoff"].endswith("CPU:1"), self.r["handoff"])
        self.assertTrue(self.r["loss"].endswith("CPU:1"), self.r["loss"])
        self.assertTrue(self.r["pred"].endswith("CPU:1"), self.r["pred"])
        self.assertEqual(self.r["iterations"], 1)


if __name__ == "__main__":
    unittest.main()
