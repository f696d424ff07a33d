"""Where things live on a data device and a model device (two logical CPUs, configured once
for the test run by tests/logical_devices.py).

    python -m unittest tests.test_dual_gpu_device_placement -v
"""

import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.devices import get_device_context  # noqa: E402


class DualDevicePlacementTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with get_device_context(PLAN.data_device):
            cls.batch_x = tf.random.uniform([8, 16])
            batch_y = tf.random.uniform([8, 4])
        with get_device_context():
            cls.default = tf.constant(1.0)
        with get_device_context(PLAN.model_device):
            model = keras.Sequential([keras.Input((16,)),
                                      keras.layers.Dense(32, activation="relu"),
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

            cls.handoff = tf.identity(cls.batch_x)
            cls.loss, cls.pred = step(cls.handoff, tf.identity(batch_y))
            metric.update_state(cls.loss)
        cls.model, cls.optimizer, cls.metric = model, optimizer, metric

    def test_plan_maps_data_to_cpu0_and_model_to_cpu1(self):
        self.assertEqual([PLAN.data_device, PLAN.model_device], ["/CPU:0", "/CPU:1"])

    def test_tensor_under_data_device_is_on_cpu0(self):
        self.assertTrue(self.batch_x.device.endswith("CPU:0"), self.batch_x.device)

    def test_default_device_context_is_cpu0_without_gpu(self):
        self.assertTrue(self.default.device.endswith("CPU:0"), self.default.device)

    def test_model_variables_on_model_device(self):
        self.assertTrue(self.model.variables)
        for v in self.model.variables:
            self.assertTrue(v.value.device.endswith("CPU:1"), v.value.device)

    def test_built_optimizer_slots_and_iterations_on_model_device(self):
        # iterations, learning rate, 2 slots per weight (6 weights)
        self.assertGreaterEqual(len(self.optimizer.variables), 12)
        for v in [*self.optimizer.variables, *self.metric.variables]:
            self.assertTrue(v.value.device.endswith("CPU:1"), v.value.device)
        self.assertEqual(int(self.optimizer.iterations.numpy()), 1)

    def test_jit_step_consumes_data_device_batch_and_outputs_on_model_device(self):
        for tensor in (self.handoff, self.loss, self.pred):
            self.assertTrue(tensor.device.endswith("CPU:1"), tensor.device)


if __name__ == "__main__":
    unittest.main()
