"""tensorflow-io is detected by running an op, and never required."""

import importlib
import importlib.util
import os
import sys
import tempfile
import unittest
from unittest import mock

from myxtts.tfio_support import tensorflow_io_status


class TensorflowIoDetectionTest(unittest.TestCase):
    def _status(self, extra_path):
        """tensorflow_io_status() as a fresh detection sees it, with extra_path (if any) first
        on sys.path; the cached answer, sys.path and sys.modules are put back afterwards."""
        tensorflow_io_status.cache_clear()
        self.addCleanup(tensorflow_io_status.cache_clear)
        path = [p for p in (extra_path,) if p] + sys.path
        with mock.patch.object(sys, "path", path), mock.patch.dict(sys.modules), \
                mock.patch.dict(sys.path_importer_cache):
            for name in [n for n in sys.modules if n.split(".")[0] == "tensorflow_io"]:
                del sys.modules[name]
            importlib.invalidate_caches()
            return tensorflow_io_status()

    def test_missing_package_is_reported_not_required(self):
        # A directory that shadows nothing: tensorflow_io is simply absent in this environment.
        try:
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
        with tempfile.TemporaryDirectory() as root:
            pkg = os.path.join(root, "tensorflow_io")
            os.makedirs(os.path.join(pkg, "audio"))
            with open(os.path.join(pkg, "__init__.py"), "w") as f:
                f.write("__version__ = '0.37.1'\nfrom tensorflow_io import audio\n")
            with open(os.path.join(pkg, "audio", "__init__.py"), "w") as f:
                f.write("def resample(*a, **k):\n"
                        "    raise NotImplementedError('unable to open file: libtensorflow_io.so, "
                        "caused by: undefined symbol: "
                        "_ZNK10tensorflow4data11DatasetBase8Finalize')\n")
            usable, reason = self._status(root)
        self.assertFalse(usable)
        self.assertIn("undefined symbol", reason)
        self.assertIn("0.37.1", reason)


if __name__ == "__main__":
    unittest.main()
