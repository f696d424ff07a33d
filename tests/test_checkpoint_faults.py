"""Checkpoint faults, each ending in a clear message and a resume from the last good checkpoint:
a kill between the index update and the deletion of old files, a full disk during a save, and
damaged (truncated, altered, missing) checkpoint files.

The kill and the full disk happen in processes of their own (tests/children/
checkpoint_faults.py); the damaged files, the resumes and every check run here.

    python -m pytest tests/test_checkpoint_faults.py -v
"""

import glob
import os
import shutil
import subprocess
import tempfile
import unittest

import tests.logical_devices  # noqa: F401  (first: configures the devices before TensorFlow)

import tensorflow as tf  # noqa: E402

from myxtts.training.checkpoints import (CheckpointError, CheckpointStore,  # noqa: E402
                                         checkpoint_step)
from tests import children  # noqa: E402


def store(directory, keep=3):
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([256, 256]))  # every element == step
    return CheckpointStore(directory, {"step": step, "weights": weights}, keep=keep), step, weights


def save_steps(s, step, weights, steps):
    for n in steps:
        step.assign(n)
        weights.assign(tf.fill([256, 256], float(n)))
        s.save(n)


def listed(directory):
    state = tf.train.get_checkpoint_state(directory)
    return [os.path.basename(p) for p in state.all_model_checkpoint_paths]


def resumed(directory):
    s, step, weights = store(directory)
    path, n = s.restore_latest()
    return {"path": os.path.basename(path), "step": n,
            "weights": float(tf.reduce_mean(weights)), "listed": listed(directory)}


def data(directory, n):
    return glob.glob(os.path.join(directory, f"ckpt-{n}.data-*"))[0]


class CheckpointFaultsTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="myxtts-checkpoint-faults-")
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)

    def warnings_of(self, function, *args):
        """function(*args) and the messages myxtts.training logged meanwhile (WARNING and up,
        what reaches a handler on the logger when nothing configured logging)."""
        with self.assertLogs("myxtts.training", "WARNING") as logs:
            result = function(*args)
        return result, [record.getMessage() for record in logs.records]

    def damaged(self):
        """ckpt-3's data altered, ckpt-2's data truncated, then a resume."""
        d = os.path.join(self.root, "damaged")
        s, step, weights = store(d, keep=4)
        save_steps(s, step, weights, [1, 2, 3])
        with open(data(d, 3), "r+b") as f:
            f.seek(os.path.getsize(data(d, 3)) // 2)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
        with open(data(d, 2), "r+b") as f:
            f.truncate(os.path.getsize(data(d, 2)) // 2)
        result, warnings = self.warnings_of(resumed, d)
        return d, result, warnings

    def test_kill_between_index_update_and_deletion(self):
        # SIGKILL right after the index dropped ckpt-1, before its files are deleted (the moment
        # that tf.train.CheckpointManager got wrong: it deletes first and rewrites the index
        # after).
        d = os.path.join(self.root, "kill")
        proc = subprocess.run(children.command("checkpoint_faults", "kill", d), cwd=children.REPO,
                              env=children.env(), capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, -9, proc.stderr[-2000:])
        self.assertEqual(listed(d), ["ckpt-2", "ckpt-3"])  # only complete checkpoints
        self.assertEqual([checkpoint_step(os.path.join(d, p)) for p in listed(d)], [2, 3])
        self.assertIn("ckpt-1.index", sorted(os.path.basename(p) for p in
                                             glob.glob(os.path.join(d, "ckpt-1.*"))))
        s, step, _ = store(d, keep=2)
        self.assertEqual(s.restore_latest()[1], 3)
        # The next save removes what the killed deletion left behind.
        step.assign(4)
        s.save(4)
        self.assertEqual(sorted(n for n in os.listdir(d) if n.endswith(".index")),
                         ["ckpt-3.index", "ckpt-4.index"])

    def test_disk_full_during_save(self):
        # The kernel refuses writes beyond a size limit during the save of ckpt-3 (the same
        # failure as a full disk, deterministic and without privileges).
        d = os.path.join(self.root, "full")
        r = children.run_json("checkpoint_faults", "disk_full", d)
        error = r["error"]
        self.assertIsNotNone(error)
        self.assertIn("Could not save checkpoint", error)
        self.assertIn("ckpt-3", error)
        self.assertIn("File too large", error)
        self.assertIn("ckpt-2) is intact", error)
        self.assertIn("free space", error)
        # The partial write is gone; the index still names ckpt-2.
        self.assertFalse([n for n in r["files"] if n.startswith("ckpt-3")], r["files"])
        self.assertEqual(resumed(d), {"path": "ckpt-2", "step": 2, "weights": 2.0,
                                      "listed": ["ckpt-1", "ckpt-2"]})

    def test_damaged_checkpoints_are_skipped_and_archived(self):
        d, result, warnings = self.damaged()
        self.assertEqual(result, {"path": "ckpt-1", "step": 1, "weights": 1.0,
                                  "listed": ["ckpt-1"]})
        warnings = " ".join(warnings)
        self.assertIn("ckpt-3: it is damaged", warnings)
        self.assertIn("Checksum does not match", warnings)
        self.assertIn("ckpt-2: it is damaged", warnings)
        self.assertIn("Resuming from", warnings)
        self.assertIn("nothing was deleted", warnings)
        archived = sorted(os.listdir(glob.glob(os.path.join(d, "archive", "*"))[0]))
        for name in ("ckpt-2.index", "ckpt-3.index"):
            self.assertIn(name, archived)

    def test_index_naming_missing_files_falls_back(self):
        # After the damaged ones were archived: ckpt-2 to ckpt-4 saved again, then ckpt-4's
        # files deleted.
        d, _, _ = self.damaged()
        s, step, weights = store(d, keep=4)
        s.restore_latest()
        save_steps(s, step, weights, [2, 3, 4])
        for name in glob.glob(os.path.join(d, "ckpt-4.*")):
            os.remove(name)
        result, warnings = self.warnings_of(resumed, d)
        self.assertEqual(result, {"path": "ckpt-3", "step": 3, "weights": 3.0,
                                  "listed": ["ckpt-1", "ckpt-2", "ckpt-3"]})
        warnings = " ".join(warnings)
        self.assertIn("ckpt-4 is listed in", warnings)
        self.assertIn("its files are missing (not damaged: absent)", warnings)
        self.assertNotIn("damaged (", warnings)
        self.assertNotIn("archive", warnings)

    def test_every_checkpoint_damaged_is_an_error(self):
        # An error, nothing moved.
        d = os.path.join(self.root, "all_damaged")
        s, step, weights = store(d)
        save_steps(s, step, weights, [1])
        with open(data(d, 1), "r+b") as f:
            f.truncate(100)
        with self.assertRaises(CheckpointError) as e:
            store(d)[0].restore_latest()
        self.assertIn("No checkpoint in", str(e.exception))
        self.assertIn("ckpt-1 is damaged", str(e.exception))
        self.assertIn("--reset-training", str(e.exception))
        self.assertEqual(listed(d), ["ckpt-1"])


if __name__ == "__main__":
    unittest.main()
