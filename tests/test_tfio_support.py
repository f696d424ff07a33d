"""tensorflow-io is detected by running an op, and never required."""

import os
import subprocess
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = ("from myxtts.tfio_support import tensorflow_io_status\n"
         "usable, reason = tensorflow_io_status()\n"
         "print(usable, reason, sep='|')\n")


class TensorflowIoDetectionTest(unittest.TestCase):
    def _status(self, extra_path):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
                   PYTHONPATH=os.pathsep.join(p for p in (REPO, extra_path) if p))
        out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                             env=env, cwd=REPO, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr[-2000:])
        usable, reason = out.stdout.strip().splitlines()[-1].split("|", 1)
        return usable == "True", reason

    def test_missing_package_is_reported_not_required(self):
        # A directory that shadows nothing: tensorflow_io is simply absent in this environment.
        try:
            import importlib.util
            installed = importlib.util.find_spec("tensorflow_io") is not None
        except ValueError:
            installed = False
        if installed:
            self.skipTest("tensorflow-io is installed here")
        usable, reason = self._status("")
        self.assertFalse(usable)
        self.assertIn("not installed", reason)

    def test_package_whose_ops_do_not_load_is_unusable(self):
        # A fake tensorflow_io whose ops fail the way 0.37 does on TF 2.21.
        import tempfile
        root = tempfile.mkdtemp()
        pkg = os.path.join(root, "tensorflow_io")
        os.makedirs(os.path.join(pkg, "audio"))
        with open(os.path.join(pkg, "__init__.py"), "w") as f:
            f.write("__version__ = '0.37.1'\nfrom tensorflow_io import audio\n")
        with open(os.path.join(pkg, "audio", "__init__.py"), "w") as f:
            f.write("def resample(*a, **k):\n"
                    "    raise NotImplementedError('unable to open file: libtensorflow_io.so, "
                    "caused by: undefined symbol: _ZNK10tensorflow4data11DatasetBase8Finalize')\n")
        usable, reason = self._status(root)
        self.assertFalse(usable)
        self.assertIn("undefined symbol", reason)
        self.assertIn("0.37.1", reason)


if __name__ == "__main__":
    unittest.main()
