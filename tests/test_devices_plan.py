"""The device plan is decided without TensorFlow: myxtts.devices plans (and its public
get_device_context stays importable) in a process that never imports TensorFlow; the checks
that need TensorFlow are myxtts.device_probes.

    python -m pytest tests/test_devices_plan.py -v
"""

import subprocess
import sys
import unittest

from tests.device_harness import REPO

# Everything train_main.py does with myxtts.devices before configure(plan), plus the seed's
# public names, in a process that must end without TensorFlow in sys.modules.
PLAN_WITHOUT_TENSORFLOW = """
import sys
from myxtts.devices import (DevicePlan, GpuInfo, configure, get_device_context, parse_gpu_list,
                            plan_devices, tensorflow_initialized)
gpus = [GpuInfo(0, "A", 8000), GpuInfo(1, "B", 8000), GpuInfo(2, "C", 8000)]
assert plan_devices(0, 1, gpus, use_env=False).mapping_line()
assert plan_devices(0, 0, gpus, split_gpu=True, use_env=False).mode == "split"
assert plan_devices(0, model_gpus=parse_gpu_list("1,2"), gpus=gpus, use_env=False).model_devices
assert plan_devices(0, 1, [], use_env=False).mode == "cpu"
assert not tensorflow_initialized()
assert "myxtts.device_probes" not in sys.modules
sys.exit(1 if "tensorflow" in sys.modules else 0)
"""


class PlanWithoutTensorFlowTest(unittest.TestCase):
    def test_planning_imports_no_tensorflow(self):
        done = subprocess.run([sys.executable, "-c", PLAN_WITHOUT_TENSORFLOW], cwd=REPO,
                              capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(done.returncode, 0, done.stderr[-2000:])


if __name__ == "__main__":
    unittest.main()
