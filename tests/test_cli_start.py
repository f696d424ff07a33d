"""How the commands start: mistakes in the arguments and in what an earlier run left are reported
in one paragraph before TensorFlow is imported, flag errors name the flag, and TensorFlow's
start-up lines stay off the console unless --verbose.

    python -m pytest tests/test_cli_start.py -v
"""

import contextlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from myxtts.cli import setup_logging
from myxtts.model_info import ModelInfoError, read_model_info, update_model_info
from tests import children
from tests.data_samples import SAMPLE_DIR
from tests.device_harness import REPO

def _env(**extra):
    # Not what this test process set up for itself (devices.configure): a user's shell.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS")}
    env.update(CUDA_VISIBLE_DEVICES="", **extra)
    return env


def _train_main(*args):
    """Runs `python train_main.py ARGS` (tests/children/cli_start.py); stdout's last line says
    whether TensorFlow had been imported when it exited."""
    return subprocess.run(children.command("cli_start", *args), capture_output=True, text=True,
                          cwd=REPO, env=_env(), timeout=300)


class ErrorsBeforeTensorFlowTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def _fails_before_tensorflow(self, *args, expect):
        args = ["--config", "configs/tiny.yaml", *args]
        if "--checkpoint-dir" not in args:
            args += ["--checkpoint-dir", os.path.join(self.tmp, "run")]
        proc = _train_main(*args)
        self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
        self.assertIn(expect, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)  # one paragraph
        self.assertIn("tensorflow imported: False", proc.stdout)
        return proc.stderr

    def test_missing_inputs(self):
        missing = os.path.join(self.tmp, "nowhere")
        self.assertIn(f"(--train-data {missing})", self._fails_before_tensorflow(
            "--train-data", missing, expect=f"The dataset folder {missing} does not exist"))
        self.assertIn(f"(--val-data {missing})", self._fails_before_tensorflow(
            "--train-data", SAMPLE_DIR, "--val-data", missing,
            expect=f"The dataset folder {missing} does not exist"))
        # A typo, as a user types it from the repository root, is answered with the folder meant.
        self._fails_before_tensorflow(
            "--train-data", "samples/ljspech_sample",
            expect="does not exist. Did you mean samples/ljspeech_sample?")
        self._fails_before_tensorflow("--train-data", SAMPLE_DIR, "--resume-from", missing,
                                      expect=f"--resume-from {missing} does not exist")
        self._fails_before_tensorflow(expect="Nothing to do: pass --train-data DIR")
        self._fails_before_tensorflow("--config", missing + ".yaml",
                                      expect=f"Config file {missing}.yaml does not exist")

    def test_flag_errors_name_the_flag(self):
        self._fails_before_tensorflow("--train-data", SAMPLE_DIR, "--batch-size", "0",
                                      expect="--batch-size must be positive (got 0; it sets "
                                             "data.batch_size)")
        self._fails_before_tensorflow("--train-data", SAMPLE_DIR, "--epochs", "0",
                                      expect="--epochs must be >= 1 (got 0")

    def test_metadata_with_another_separator(self):
        for separator, name in ((",", "comma"), ("\t", "tab"), (";", "semicolon")):
            data = os.path.join(self.tmp, f"data-{name}")
            os.makedirs(os.path.join(data, "wavs"), exist_ok=True)
            with open(os.path.join(data, "metadata.csv"), "w", encoding="utf-8") as f:
                f.write(f"a1{separator}Hello there.{separator}Hello there.\n"
                        f"a2{separator}Good bye.{separator}Good bye.\n")
            error = self._fails_before_tensorflow("--train-data", data,
                                                  expect=f"looks {name}-separated")
            self.assertIn("The separator must be '|'", error)

    def test_hand_edited_files_in_the_run_directory(self):
        run = os.path.join(self.tmp, "edited")
        os.makedirs(run)
        with open(os.path.join(run, "model_info.json"), "w", encoding="utf-8") as f:
            f.write('{"steps_trained": 200,\n "best_val_loss": 1.5,}\n')
        error = self._fails_before_tensorflow("--train-data", SAMPLE_DIR, "--checkpoint-dir", run,
                                              expect=f"{run}/model_info.json is not valid JSON")
        self.assertIn("line 2", error)
        os.remove(os.path.join(run, "model_info.json"))
        with open(os.path.join(run, "config.yaml"), "w", encoding="utf-8") as f:
            f.write("data:\n  batch_size: [8\n")
        self._fails_before_tensorflow("--train-data", SAMPLE_DIR, "--checkpoint-dir", run,
                                      expect=f"{run}/config.yaml is not valid YAML")
        with open(os.path.join(run, "config.yaml"), encoding="utf-8") as f:
            self.assertEqual(f.read(), "data:\n  batch_size: [8\n")  # never overwritten


class ModelInfoTest(unittest.TestCase):
    def test_invalid_json_is_an_error_and_the_file_stays(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model_info.json")
            for text in ("{not json", "[1, 2]"):
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                with self.assertRaisesRegex(ModelInfoError, "Undo the edit, or move the file"):
                    update_model_info(tmp, steps_trained=3)
                with open(path, encoding="utf-8") as f:
                    self.assertEqual(f.read(), text)
            os.remove(path)
            update_model_info(tmp, steps_trained=3)
            self.assertEqual(read_model_info(tmp), {"steps_trained": 3})


class QuietStartTest(unittest.TestCase):
    def _device_check(self, *extra):
        proc = subprocess.run([sys.executable, os.path.join(REPO, "train_main.py"),
                               "--device-check", *extra], capture_output=True, text=True,
                              cwd=REPO, env=_env(), timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        return proc.stderr

    def test_no_tensorflow_start_up_lines_unless_verbose(self):
        quiet = self._device_check()
        self.assertIn("No GPU found: running on two logical CPU devices", quiet)  # myxtts logs
        for noise in ("E0000", "I0000", "absl::InitializeLog", "oneDNN custom operations",
                      "cudart_stub"):
            self.assertNotIn(noise, quiet)
        self.assertIn("absl::InitializeLog", self._device_check("--verbose"))

    def test_tensorflow_info_lines_are_not_logged(self):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                setup_logging()
                tf.get_logger().info("Assets written to: models/x/.tmp-export-1/assets")
                logging.getLogger("myxtts").info("Exported as models/x/1")
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        self.assertNotIn(".tmp-export-", stderr.getvalue())
        self.assertIn("Exported as models/x/1", stderr.getvalue())


if __name__ == "__main__":
    unittest.main()
