"""End to end through train_main.py on the bundled sample dataset, two logical CPU devices:
loss falls, checkpoints and TensorBoard events appear, SIGTERM saves and exits, kill -9 then
resume continues from the latest checkpoint, and the primary spec's command line starts.

    python -m pytest tests/test_training_cli.py -v
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import pytest
import yaml

from tests.device_harness import REPO, run_cli, run_probe

SAMPLE = os.path.join(REPO, "samples", "ljspeech_sample")
STEP_LINE = re.compile(r"step (\d+) \(epoch \d+\): loss ([0-9.]+)")


def _lifecycle_config(path: str) -> str:
    """configs/tiny.yaml with one length bucket (one compile) and frequent saves."""
    with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    raw["data"]["num_buckets"] = 1
    raw["training"].update(checkpoint_every_steps=5, validate_every_steps=10, log_every_steps=5,
                           xla=False)
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(raw, f)
    return path


def _start(args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, os.path.join(REPO, "train_main.py"), *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _read_until(proc, pattern: str, timeout: float = 400):
    """Reads the process output until a line matches; returns (match, all lines so far)."""
    deadline = time.monotonic() + timeout
    lines = []
    for line in proc.stdout:
        lines.append(line)
        match = re.search(pattern, line)
        if match:
            return match, lines
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"'{pattern}' never appeared:\n{''.join(lines[-40:])}")


@pytest.mark.slow
class TrainingLifecycleTest(unittest.TestCase):
    """One run directory: train → SIGTERM (save + exit) → resume → kill -9 → resume to the end."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp()
        cls.run_dir = os.path.join(cls.root, "run")
        config = _lifecycle_config(os.path.join(cls.root, "tiny1.yaml"))
        cls.base = ["--config", config, "--train-data", SAMPLE, "--checkpoint-dir", cls.run_dir]

        # 1. Train until the checkpoint after the second validation, then SIGTERM.
        proc = _start(cls.base + ["--max-steps", "1000"])
        _, lines = _read_until(proc, r"Saved checkpoint \S+/run/ckpt-25 ")
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=300)
        cls.first = "".join(lines) + rest
        cls.first_rc = proc.returncode

        # 2. Resume, and kill -9 right after the next checkpoint is announced.
        proc = _start(cls.base + ["--max-steps", "1000"])
        match, lines = _read_until(proc, r"Saved checkpoint \S+/run/ckpt-(\d+) ")
        proc.kill()
        proc.communicate(timeout=60)
        cls.second = "".join(lines)
        cls.killed_after = int(match.group(1))

        # 3. Every checkpoint on disk must be readable.
        cls.readable = run_probe(f"""
from myxtts.training.checkpoints import checkpoint_step
state = tf.train.get_checkpoint_state({cls.run_dir!r})
print(json.dumps({{"latest": state.model_checkpoint_path,
                   "steps": [checkpoint_step(p) for p in state.all_model_checkpoint_paths]}}))
""")
        latest = int(cls.readable["latest"].rsplit("-", 1)[1])
        cls.latest = latest

        # 4. Resume to the end.
        cls.final = run_cli(cls.base + ["--max-steps", str(latest + 3)])

    def test_sigterm_saves_and_exits_with_128_plus_signal(self):
        self.assertEqual(self.first_rc, 128 + signal.SIGTERM, self.first[-3000:])
        self.assertIn("SIGTERM received", self.first)
        stopped = re.search(r"Training stopped at step (\d+) \(signal SIGTERM\)", self.first)
        self.assertIsNotNone(stopped, self.first[-3000:])
        self.assertRegex(self.first, rf"Saved checkpoint \S+/run/ckpt-{stopped.group(1)} ")

    def test_model_and_optimizer_live_on_the_model_device(self):
        self.assertIn("Creating model on device: /CPU:1", self.first)
        self.assertRegex(self.first, r"optimizer AdamW with \d+ variables \(slots built\); "
                                     r"all on CPU:1")

    def test_loss_falls(self):
        losses = [float(m.group(2)) for m in STEP_LINE.finditer(self.first)]
        self.assertGreaterEqual(len(losses), 4, self.first[-3000:])
        self.assertLess(losses[-1], 0.8 * losses[0], losses)

    def test_checkpoints_best_and_tensorboard_events_appear(self):
        self.assertTrue(os.path.exists(os.path.join(self.run_dir, "best", "checkpoint")))
        for split in ("train", "val"):
            events = glob.glob(os.path.join(self.run_dir, "tensorboard", split, "events.*"))
            self.assertTrue(events, split)
        for name in ("config.yaml", "vocab.json", "model_info.json"):
            self.assertTrue(os.path.exists(os.path.join(self.run_dir, name)), name)

    def test_resume_continues_from_the_checkpoint(self):
        self.assertRegex(self.second, r"Resumed from .*/ckpt-\d+ at step \d+")
        resumed = int(re.search(r"Resumed from .*/ckpt-(\d+) at step", self.second).group(1))
        self.assertGreater(self.killed_after, resumed)

    def test_kill_minus_9_leaves_only_readable_checkpoints(self):
        self.assertGreaterEqual(self.latest, self.killed_after)
        self.assertTrue(self.readable["steps"])

    def test_final_run_resumes_after_kill_and_finishes(self):
        out = self.final.stdout + self.final.stderr
        self.assertEqual(self.final.returncode, 0, out[-3000:])
        self.assertIn(f"Resumed from {self.run_dir}/ckpt-{self.latest} at step {self.latest}", out)
        self.assertIn(f"Trained to step {self.latest + 3} (max_steps)", out)
        self.assertRegex(out, r"best validation loss \d+\.\d{4};")  # rounded
        self.assertTrue(os.path.exists(os.path.join(self.run_dir,
                                                    f"ckpt-{self.latest + 3}.index")))
        with open(os.path.join(self.run_dir, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        self.assertEqual(info["steps_trained"], self.latest + 3)
        self.assertIsNotNone(info["best_val_loss"])


@pytest.mark.slow
class SeedCommandLineTest(unittest.TestCase):
    """The primary spec's command, plus --buffer-size and --model-start-delay; --config tiny and
    --max-steps keep it short on a CPU."""

    def test_seed_command_parses_and_trains(self):
        run_dir = tempfile.mkdtemp()
        proc = run_cli(["--data-gpu", "0", "--model-gpu", "1", "--train-data", SAMPLE,
                        "--val-data", SAMPLE, "--batch-size", "32", "--epochs", "100",
                        "--buffer-size", "25", "--model-start-delay", "5",
                        "--config", "configs/tiny.yaml", "--noxla", "--max-steps", "2",
                        "--checkpoint-dir", run_dir])
        out = proc.stdout + proc.stderr
        self.assertEqual(proc.returncode, 0, out[-3000:])
        self.assertIn("data → /CPU:0, model → /CPU:1", out)
        self.assertIn("Creating model on device: /CPU:1", out)
        self.assertRegex(out, r"Model start delay: the data device filled \d+% of the feeder")
        self.assertIn("Trained to step 2 (max_steps)", out)
        with open(os.path.join(run_dir, "config.yaml"), encoding="utf-8") as f:
            saved = yaml.safe_load(f)
        self.assertEqual((saved["data"]["batch_size"], saved["data"]["buffer_size"],
                          saved["training"]["epochs"], saved["training"]["xla"]),
                         (32, 25, 100, False))

    def test_flag_errors_are_one_paragraph_without_traceback(self):
        proc = run_cli(["--config", "configs/tiny.yaml", "--train-data", SAMPLE,
                        "--grad-accum", "0", "--checkpoint-dir", tempfile.mkdtemp()])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--grad-accum must be >= 1 (got 0; it sets training.grad_accum_steps)",
                      proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)


if __name__ == "__main__":
    unittest.main()
