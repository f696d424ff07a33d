"""Checkpoints: resume with identical optimizer and loss-scale state, --resume-from an older
checkpoint and --reset-training archive instead of deleting, a non-finite streak stops training
without touching the last good checkpoint, and kill -9 during saves never leaves the latest
checkpoint unreadable.

The kill -9 runs tests/children/checkpoints.py in processes of its own; everything else runs
here, on the test run's data device (/CPU:0) and model device (/CPU:1).

    python -m pytest tests/test_checkpoints.py -v
"""

import glob
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.training.checkpoints import CheckpointStore, checkpoint_step  # noqa: E402
from myxtts.training.trainer import TrainingStopped, XTTSTrainer  # noqa: E402
from tests import children  # noqa: E402
from tests.trainer_probes import (TOKENIZER, batch, feeder_of, make_trainer,  # noqa: E402
                                  restored_global_state)
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow


class NanPipeline:
    """Three NaN batches, then two finite ones."""
    val_steps = 0

    def train_batches(self, epoch, device, skip_batches=0):
        return feeder_of([batch(nan=True)] * 3 + [batch(seed=1)] * 2, device)


def resume_scenario(workdir):
    out = {}
    d = os.path.join(workdir, "run")
    a = make_trainer(d, precision="mixed_float16", xla=False)
    for s in range(3):
        a.step(batch(seed=s))
    a.step(batch(nan=True))  # halves the loss scale: that state must survive the restart too
    saved = a._save()
    b = make_trainer(d, precision="mixed_float16", xla=False)
    out["saved"] = os.path.basename(saved)
    out["resumed_step"] = b.global_step
    out["same_optimizer"] = all(np.array_equal(x.numpy(), y.numpy())
                                for x, y in zip(a.optimizer.variables, b.optimizer.variables))
    out["n_optimizer"] = len(b.optimizer.variables)
    out["loss_scale"] = [a.step.loss_scale(), b.step.loss_scale()]
    out["nonfinite_total"] = int(b.step.nonfinite_total.numpy())
    out["same_weights"] = all(np.array_equal(x, y) for x, y in zip(a.model.get_weights(),
                                                                   b.model.get_weights()))
    ra, rb = a.step(batch(seed=9)), b.step(batch(seed=9))
    out["next_step"] = [a.global_step, b.global_step]
    out["next_loss"] = [float(ra["total"]), float(rb["total"])]
    out["continues_identically"] = max(float(np.max(np.abs(x - y))) for x, y in
                                       zip(a.model.get_weights(), b.model.get_weights()))
    b._save()  # ckpt-5
    b.checkpoints.save_best(5)
    out["skip_same_step"] = b.checkpoints.save(5) is None

    # --resume-from an older checkpoint: the newer one is archived, not overwritten or deleted.
    c = XTTSTrainer(b.config, resume_checkpoint=os.path.join(d, "ckpt-4"),
                    model_device=PLAN.model_device, tokenizer=TOKENIZER)
    out["resume_from_step"] = c.global_step
    archives = os.listdir(os.path.join(d, "archive"))
    out["archived_after_resume_from"] = sorted(os.listdir(os.path.join(d, "archive",
                                                                       archives[0])))
    out["latest_after_resume_from"] = c.checkpoints.latest

    # --reset-training: step 0, everything earlier archived.
    e = XTTSTrainer(b.config, model_device=PLAN.model_device, tokenizer=TOKENIZER,
                    reset_training=True)
    out["reset_step"] = e.global_step
    out["archives"] = len(os.listdir(os.path.join(d, "archive")))
    out["after_reset"] = sorted(n for n in os.listdir(d) if n.startswith("ckpt"))

    # A streak of non-finite steps stops fit() with a message; the last good checkpoint stays.
    # The step latches the streak on the device and the loop sees it at the next log point
    # (tiny.yaml: every 5 steps): three NaN batches (steps 2-4) reach the limit, the finite
    # step 5 after them does not undo it, and fit() stops at step 5's log point.
    e.step(batch())
    good = e._save()
    # Resumes ckpt-1; the limit is compiled into the step, so it is set before the step is built.
    e = make_trainer(d, precision="mixed_float16", xla=False, max_nonfinite_steps=3)
    try:
        e.fit(NanPipeline())
        out["nan_stop"] = None
    except TrainingStopped as err:
        out["nan_stop"] = str(err)
    out["good"] = os.path.basename(good)
    out["latest_after_nan_stop"] = os.path.basename(e.checkpoints.latest)
    out["latest_step_after_nan_stop"] = checkpoint_step(e.checkpoints.latest)
    return out


def verify_snapshots(snapshots):
    """For each copy of the killed saver's directory: whether every listed checkpoint is
    readable, and what the latest restores to."""
    out = []
    for snapshot in sorted(glob.glob(os.path.join(snapshots, "*"))):
        state = tf.train.get_checkpoint_state(snapshot)
        listed = list(state.all_model_checkpoint_paths)
        readable = []
        for path in listed:
            path = path if os.path.isabs(path) else os.path.join(snapshot, path)
            try:
                checkpoint_step(path)
                readable.append(True)
            except Exception:  # pylint: disable=broad-except
                readable.append(False)
        step = tf.Variable(0, dtype=tf.int64)
        weights = [tf.Variable(tf.zeros([1000, 1000])) for _ in range(6)]
        store = CheckpointStore(snapshot, {"step": step, "weights": weights}, keep=3)
        restored = store.restore(store.latest)
        consistent = all(float(tf.reduce_min(w)) == float(tf.reduce_max(w)) == restored
                         for w in weights)
        out.append({"latest": os.path.basename(state.model_checkpoint_path),
                    "readable": readable, "restored": restored, "consistent": consistent,
                    "temp_dirs_left": len(glob.glob(os.path.join(snapshot, "*_temp")))})
    return out


class ResumeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        workdir = tempfile.mkdtemp(prefix="myxtts-resume-test-")
        try:
            with restored_global_state():
                cls.r = resume_scenario(workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    def test_resume_restores_step_weights_optimizer_and_loss_scale(self):
        r = self.r
        self.assertEqual((r["saved"], r["resumed_step"]), ("ckpt-4", 4))
        self.assertTrue(r["same_weights"])
        self.assertTrue(r["same_optimizer"])
        self.assertGreater(r["n_optimizer"], 100)
        self.assertEqual(r["loss_scale"][0], r["loss_scale"][1])
        self.assertEqual(r["loss_scale"][1], 2.0 ** 14)  # 2**15 halved by the NaN step
        self.assertEqual(r["nonfinite_total"], 1)

    def test_resumed_training_continues_at_the_next_step_identically(self):
        self.assertEqual(self.r["next_step"], [5, 5])
        self.assertEqual(self.r["next_loss"][0], self.r["next_loss"][1])
        self.assertLessEqual(self.r["continues_identically"], 1e-6)

    def test_a_saved_step_is_never_written_twice(self):
        self.assertTrue(self.r["skip_same_step"])

    def test_resume_from_older_checkpoint_archives_newer_ones(self):
        self.assertEqual(self.r["resume_from_step"], 4)
        archived = self.r["archived_after_resume_from"]
        for name in ("ckpt-4.index", "ckpt-5.index", "best", "checkpoint"):
            self.assertIn(name, archived)
        self.assertIsNone(self.r["latest_after_resume_from"])

    def test_nonfinite_streak_stops_training_and_keeps_the_last_good_checkpoint(self):
        r = self.r
        self.assertIsNotNone(r["nan_stop"])
        self.assertIn("3 consecutive optimizer steps had non-finite", r["nan_stop"])
        self.assertIn("up to step 4 (seen at step 5)", r["nan_stop"])
        self.assertIn("ckpt-1", r["nan_stop"])
        self.assertEqual((r["good"], r["latest_after_nan_stop"]), ("ckpt-1", "ckpt-1"))
        self.assertEqual(r["latest_step_after_nan_stop"], 1)

    def test_reset_training_starts_at_zero_and_archives(self):
        self.assertEqual(self.r["reset_step"], 0)
        self.assertEqual(self.r["after_reset"], [])
        self.assertEqual(self.r["archives"], 2)


class KillDuringSaveTest(unittest.TestCase):
    """SIGKILL at random moments while checkpoints are being written, three times."""

    def test_latest_checkpoint_stays_readable(self):
        root = tempfile.mkdtemp(prefix="myxtts-kill-test-")
        self.addCleanup(shutil.rmtree, root, ignore_errors=True)
        directory, snapshots = os.path.join(root, "ckpt"), os.path.join(root, "snapshots")
        os.makedirs(snapshots)
        env = children.env(TF_CPP_MIN_LOG_LEVEL="3")
        rng = random.Random(0)
        last_started = -1
        for round_ in range(3):
            proc = subprocess.Popen(children.command("checkpoints", directory), env=env,
                                    cwd=children.REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            saves = []
            for line in proc.stdout:
                if line.startswith("start"):
                    started = int(line.split()[1])
                    self.assertGreaterEqual(started, last_started)  # resumed, never went back
                    last_started = started
                elif line.startswith("saved"):
                    saves.append(int(line.split()[1]))
                    if len(saves) == 3:
                        break
            time.sleep(rng.uniform(0.0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
            shutil.copytree(directory, os.path.join(snapshots, f"{round_}"))
        results = verify_snapshots(snapshots)
        self.assertEqual(len(results), 3)
        for r in results:
            self.assertTrue(all(r["readable"]), r)
            self.assertEqual(f"ckpt-{r['restored']}", r["latest"])
            self.assertTrue(r["consistent"], r)
        self.assertGreater(last_started, 0)


if __name__ == "__main__":
    unittest.main()
