"""Which CPU kernels TensorFlow runs (devices.choose_cpu_kernels): oneDNN's on every x86-64 CPU
unless the user set TF_ENABLE_ONEDNN_OPTS, and the model trains on TensorFlow's own kernels too.
About a process's start, so each case runs tests/children/cpu_kernels.py.

    python -m pytest tests/test_cpu_kernels.py -v
"""

import json
import platform
import subprocess
import unittest

import numpy as np

from tests import children


def _child(**setting) -> dict:
    env = children.env(**setting)
    if not setting:
        env.pop("TF_ENABLE_ONEDNN_OPTS", None)  # as a user's shell has it, not this process
    proc = subprocess.run(children.command("cpu_kernels"), capture_output=True, text=True,
                          env=env, cwd=children.REPO, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"tests.children.cpu_kernels failed (exit {proc.returncode}):\n"
                             f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class CpuKernelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.default = _child()  # what a user who never set the variable gets
        cls.own = _child(TF_ENABLE_ONEDNN_OPTS="0")

    @unittest.skipUnless(platform.machine().lower() in ("x86_64", "amd64"), "x86-64 only")
    def test_onednn_runs_on_x86_64_unless_the_user_says_otherwise(self):
        # TensorFlow alone turns oneDNN on only on CPUs with AVX-512 VNNI/BF16 or AMX.
        self.assertEqual(self.default["kernels"], "oneDNN (TF_ENABLE_ONEDNN_OPTS=1)")

    def test_the_dilated_probe_has_the_same_gradients_on_tensorflows_own_kernels(self):
        self.assertEqual(self.own["kernels"],
                         "TensorFlow's own, not oneDNN (TF_ENABLE_ONEDNN_OPTS=0)")
        own, default = np.array(self.own["gradient"]), np.array(self.default["gradient"])
        self.assertEqual(own.shape, default.shape)
        self.assertTrue(np.all(np.isfinite(own)))
        # The kernel sets sum in different orders: equal to float32 round-off, not bit for bit.
        np.testing.assert_allclose(own, default, rtol=1e-4,
                                   atol=1e-5 * float(np.max(np.abs(default))))


if __name__ == "__main__":
    unittest.main()
