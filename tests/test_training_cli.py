"""End to end through train_main.py on the bundled sample dataset, two logical CPU devices:
the README's command sequence with relative paths from a working folder (loss falls,
checkpoints and TensorBoard events appear, Ctrl-C saves and exits, kill -9 then resume continues
from the latest checkpoint, synthesize/export/evaluate), and the primary spec's command line.

    python -m pytest tests/test_training_cli.py -v
"""

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import pytest
import tensorflow as tf
import yaml

from tests.device_harness import REPO, run_cli

SAMPLE = os.path.join(REPO, "samples", "ljspeech_sample")
TRAIN_MAIN = os.path.join(REPO, "train_main.py")
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


def _env():
    """A user's environment: no TF_CPP_MIN_LOG_LEVEL (the commands keep one that is set)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    return dict(env, CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")


def _start(args, cwd):
    return subprocess.Popen([sys.executable, TRAIN_MAIN, *args],
                            cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _run(args, cwd):
    """`python ARGS` in `cwd`; returns (exit status, stdout + stderr)."""
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


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


def readme_command(*words: str):
    """The README command (a line of a ```bash block, backslash continuations joined, a trailing
    comment dropped) that holds every one of `words`, as argv after `python` (train_main.py
    the repository's)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```bash\n(.*?)```", f.read(), re.S)
    commands = [line.split("  #")[0].split() for block in blocks
                for line in block.replace("\\\n", " ").splitlines()]
    found = [c for c in commands if c[:1] == ["python"] and all(w in c for w in words)]
    assert len(found) == 1, (words, found)
    return [TRAIN_MAIN if word == "train_main.py" else word for word in found[0][1:]]


def _listed(index_path: str):
    with open(index_path, encoding="utf-8") as f:
        return re.findall(r'all_model_checkpoint_paths: "([^"]+)"', f.read())


@pytest.mark.slow
class ReadmeSequenceTest(unittest.TestCase):
    """The README's commands the way a user types them, from a working folder with relative
    paths, on one run directory: train → Ctrl-C (save, exit 130, how to resume) → the same
    command (resumes) → kill -9 → raise --max-steps (resumes at the next step) → the same
    command again (nothing to train) → --resume-from into another folder → synthesize, export
    and evaluate."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp()
        os.makedirs(os.path.join(cls.root, "configs"))
        os.makedirs(os.path.join(cls.root, "samples"))
        shutil.copytree(SAMPLE, os.path.join(cls.root, "samples", "ljspeech_sample"))
        _lifecycle_config(os.path.join(cls.root, "configs", "tiny1.yaml"))
        shutil.copy(os.path.join(REPO, "configs", "tiny.yaml"), os.path.join(cls.root, "configs"))
        cls.run_dir = os.path.join(cls.root, "runs", "tiny")
        cls.base = ["--config", "configs/tiny1.yaml", "--train-data", "samples/ljspeech_sample",
                    "--checkpoint-dir", "runs/tiny"]

        # 1. Train until the checkpoint after the second validation, then Ctrl-C (SIGINT).
        proc = _start(cls.base + ["--max-steps", "1000"], cls.root)
        _, lines = _read_until(proc, r"Saved checkpoint runs/tiny/ckpt-25 ")
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=300)
        cls.first = "".join(lines) + rest
        cls.first_rc = proc.returncode

        # 2. The same command resumes; kill -9 right after the next checkpoint is announced.
        proc = _start(cls.base + ["--max-steps", "1000"], cls.root)
        match, lines = _read_until(proc, r"Saved checkpoint runs/tiny/ckpt-(\d+) ")
        proc.kill()
        proc.communicate(timeout=60)
        cls.second = "".join(lines)
        cls.killed_after = int(match.group(1))

        # 3. Every checkpoint the index lists must be readable.
        listed = _listed(os.path.join(cls.run_dir, "checkpoint"))
        cls.readable = [int(tf.train.load_checkpoint(os.path.join(cls.run_dir, name))
                            .get_tensor("step/.ATTRIBUTES/VARIABLE_VALUE")) for name in listed]
        cls.latest = cls.readable[-1]

        # 4. Raise --max-steps: resumes after kill -9 and trains to the end; then again.
        cls.final = _run([TRAIN_MAIN, *cls.base, "--max-steps", str(cls.latest + 3)],
                         cls.root)
        cls.again = _run([TRAIN_MAIN, *cls.base, "--max-steps", str(cls.latest + 3)],
                         cls.root)

        # 5. --resume-from the oldest checkpoint kept into another folder.
        oldest = _listed(os.path.join(cls.run_dir, "checkpoint"))[0]
        cls.branch_from = int(oldest.rsplit("-", 1)[1])
        cls.branch = _run([TRAIN_MAIN, *cls.base[:4], "--checkpoint-dir", "runs/branch",
                           "--resume-from", f"runs/tiny/{oldest}",
                           "--max-steps", str(cls.branch_from + 2)], cls.root)

        # 6. Speak, export and judge the run, as the README says.
        cls.synthesize = _run(["-m", "myxtts.synthesize", "--checkpoint-dir", "runs/tiny",
                               "--reference-audio", "samples/ljspeech_sample/wavs/S003.flac",
                               "--text", "In the beginning God created the heaven.",
                               "--output", "hello.wav", "--max-decoder-steps", "20"], cls.root)
        small = ["--max-decoder-steps", "20", "--griffin-lim-iters", "2"]
        cls.export = _run([*readme_command("myxtts.export", "models/myxtts"), *small],
                          cls.root)
        cls.evaluate = _run(["-m", "myxtts.evaluate", "--checkpoint-dir", "runs/tiny", "--num",
                             "10", "--output", "report.json", *small], cls.root)

        # 7. The README's vocoder section (a smoke vocoder) and its export, then the README's
        #    server: it still serves the acoustic export, and says so.
        cls.vocoder = _run([*readme_command("--stage", "vocoder"), "--max-steps", "2"], cls.root)
        cls.vocoder_export = _run([*readme_command("myxtts.export", "--vocoder-dir"), *small],
                                  cls.root)
        server = subprocess.Popen(
            [sys.executable, *readme_command("myxtts.serve", "models/myxtts"), "--port", "0"],
            cwd=cls.root, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)
        try:
            cls.serving = _read_until(server, r"Serving ")[0].string
        finally:
            server.terminate()
            server.communicate(timeout=120)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_ctrl_c_saves_exits_130_and_says_how_to_resume(self):
        self.assertEqual(self.first_rc, 128 + signal.SIGINT, self.first[-3000:])
        self.assertIn("SIGINT received", self.first)
        stopped = re.search(r"Training stopped at step (\d+) \(signal SIGINT\)", self.first)
        self.assertIsNotNone(stopped, self.first[-3000:])
        step = stopped.group(1)
        self.assertIn(f"Saved checkpoint runs/tiny/ckpt-{step} ", self.first)
        self.assertEqual(self.first.strip().splitlines()[-1],
                         f"Interrupted at step {step}: run the same command again to resume "
                         f"from runs/tiny/ckpt-{step} (nothing is lost).")
        self.assertRegex(self.second, rf"Resumed from runs/tiny/ckpt-{step} at step {step} ")

    def test_model_and_optimizer_live_on_the_model_device(self):
        self.assertIn("Creating model on device: /CPU:1", self.first)
        self.assertRegex(self.first, r"optimizer FusedAdamW with \d+ variables \(slots built\); "
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

    def test_kill_minus_9_leaves_only_readable_checkpoints(self):
        self.assertGreaterEqual(self.latest, self.killed_after)
        self.assertTrue(self.readable)

    def test_raising_max_steps_resumes_after_kill_and_finishes(self):
        code, out = self.final
        self.assertEqual(code, 0, out[-3000:])
        self.assertNotIn("damaged", out)
        self.assertIn(f"Resumed from runs/tiny/ckpt-{self.latest} at step {self.latest}", out)
        self.assertIn(f"Trained to step {self.latest + 3} (max_steps)", out)
        self.assertRegex(out, r"best validation loss \d+\.\d{4} \(step \d+\);")  # rounded
        self.assertTrue(os.path.exists(os.path.join(self.run_dir,
                                                    f"ckpt-{self.latest + 3}.index")))
        with open(os.path.join(self.run_dir, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        self.assertEqual(info["steps_trained"], self.latest + 3)
        self.assertIsNotNone(info["best_val_loss"])

    def test_the_same_command_again_trains_nothing(self):
        code, out = self.again
        self.assertEqual(code, 0, out[-3000:])
        self.assertIn(f"Already at step {self.latest + 3} >= --max-steps {self.latest + 3}: "
                      f"nothing to train.", out)
        self.assertIn(f"Nothing to train: the run already stands at step {self.latest + 3}, "
                      f"its max_steps (raise --max-steps to train on)", out)
        self.assertNotIn("Trained to step", out)

    def test_resume_from_lists_only_the_folders_own_checkpoints(self):
        code, out = self.branch
        self.assertEqual(code, 0, out[-3000:])
        first = self.branch_from
        self.assertIn(f"Resumed from runs/tiny/ckpt-{first} (--resume-from) at step {first}",
                      out)
        self.assertEqual(_listed(os.path.join(self.root, "runs", "branch", "checkpoint")),
                         [f"ckpt-{first + 2}"])

    def test_synthesize_export_and_evaluate_take_relative_paths(self):
        for name, (code, out) in (("synthesize", self.synthesize), ("export", self.export),
                                  ("evaluate", self.evaluate)):
            with self.subTest(name):
                self.assertEqual(code, 0, out[-3000:])
                for noise in ("I0000", "E0000", "Compiled cluster"):
                    self.assertNotIn(noise, out)
        self.assertTrue(os.path.isfile(os.path.join(self.root, "hello.wav")))
        self.assertTrue(os.path.isfile(os.path.join(self.root, "models", "myxtts", "1",
                                                    "saved_model.pb")))
        with open(os.path.join(self.root, "report.json"), encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(report["num"], 3)
        self.assertIn("--num 10: only 3 held-out sentence(s) can be evaluated", self.evaluate[1])
        self.assertIn("pass --data", self.evaluate[1])

    def test_the_vocoder_export_leaves_the_served_model_alone(self):
        for name, (code, out) in (("vocoder", self.vocoder),
                                  ("vocoder export", self.vocoder_export)):
            with self.subTest(name):
                self.assertEqual(code, 0, out[-3000:])
        self.assertEqual(sorted(os.listdir(os.path.join(self.root, "models", "myxtts"))),
                         ["1"])
        step = self.latest + 3
        self.assertIn(f"(version 1 of models/myxtts: runs/tiny/ckpt-{step} (step {step}), "
                      f"vocoder Griffin-Lim (2 iterations))", self.serving)
        from myxtts.inference.exported_model import ExportedModel  # pylint: disable=import-outside-toplevel
        cwd = os.getcwd()
        os.chdir(self.root)  # the paths as the user typed them
        try:
            served = ExportedModel("models/myxtts-vocoder").describe()
        finally:
            os.chdir(cwd)
        self.assertRegex(served, rf"^version 1 of models/myxtts-vocoder: runs/tiny/ckpt-{step} "
                                 rf"\(step {step}\), vocoder (HiFi-GAN|Vocos) "
                                 rf"runs/vocoder/ckpt-2 \(trained 2 steps\)$")


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

    def test_help_lists_the_flags_and_exits_0(self):
        for flag in ("--help", "--helpfull"):
            proc = run_cli([flag])
            self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
            self.assertIn("--train-data", proc.stdout)


def test_the_resume_hint_leaves_out_flags_that_would_go_back(capsys):
    """After a signal, running the printed command resumes where the run stopped: a run started
    with --resume-from or --reset-training is told to leave them out."""
    import train_main  # pylint: disable=import-outside-toplevel
    from myxtts.training.base import FitSummary  # pylint: disable=import-outside-toplevel
    summary = FitSummary(7, 0, "signal SIGINT", "runs/x/ckpt-7", None)
    cases = [([], "run the same command again to resume from runs/x/ckpt-7"),
             (["--resume-from", "runs/x/ckpt-3"],
              "run the same command without --resume-from to resume from runs/x/ckpt-7"),
             (["--reset-training"], "run the same command without --reset-training to resume")]
    for argv, expected in cases:
        train_main.FLAGS(["train_main.py", *argv])
        try:
            code = train_main._report(summary, "", "runs/x")
        finally:
            train_main.FLAGS.unparse_flags()
        assert code == 128 + 2
        assert expected in capsys.readouterr().out.strip().splitlines()[-1]


if __name__ == "__main__":
    unittest.main()
