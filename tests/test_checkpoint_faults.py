"""Checkpoint faults, each ending in a clear message and a resume from the last good checkpoint:
a kill between the index update and the deletion of old files, a full disk during a save, and
damaged (truncated, altered, missing) checkpoint files.

    python -m pytest tests/test_checkpoint_faults.py -v
"""

import unittest

from tests.device_harness import run_probe

FAULTS_PROBE = """
import glob, logging, os, resource, signal, subprocess, tempfile
from myxtts.training.checkpoints import CheckpointError, CheckpointStore, checkpoint_step

warnings = []
handler = logging.Handler()
handler.emit = lambda record: warnings.append(record.getMessage())
logging.getLogger("myxtts.training").addHandler(handler)
root = tempfile.mkdtemp()
out = {}


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


# 1. SIGKILL right after the index dropped ckpt-1, before its files are deleted (the moment that
#    tf.train.CheckpointManager got wrong: it deletes first and rewrites the index after).
d = os.path.join(root, "kill")
saver = '''
import os, signal, sys
import tensorflow as tf
from myxtts.training.checkpoints import CheckpointStore
step = tf.Variable(0, dtype=tf.int64)
weights = tf.Variable(tf.zeros([256, 256]))
s = CheckpointStore(sys.argv[1], {"step": step, "weights": weights}, keep=2)
for n in (1, 2):
    step.assign(n)
    s.save(n)
os.remove = lambda path: os.kill(os.getpid(), signal.SIGKILL)
step.assign(3)
s.save(3)
'''
out["kill_status"] = subprocess.run([sys.executable, "-c", saver, d]).returncode
out["kill_listed"] = listed(d)
out["kill_readable"] = [checkpoint_step(os.path.join(d, p)) for p in listed(d)]
out["kill_leftover"] = sorted(os.path.basename(p) for p in glob.glob(os.path.join(d, "ckpt-1.*")))
s, step, _ = store(d, keep=2)
out["kill_resumed"] = s.restore_latest()[1]
step.assign(4)
s.save(4)
out["kill_after_next_save"] = sorted(n for n in os.listdir(d) if n.endswith(".index"))

# 2. The disk fills up during a save: the kernel refuses writes beyond a size limit (the same
#    failure as a full disk, deterministic and without privileges).
d = os.path.join(root, "full")
s, step, weights = store(d)
save_steps(s, step, weights, [1, 2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limits = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limits[1]))
step.assign(3)
weights.assign(tf.fill([256, 256], 3.0))
try:
    s.save(3)
    out["full_error"] = None
except CheckpointError as e:
    out["full_error"] = str(e)
resource.setrlimit(resource.RLIMIT_FSIZE, limits)
out["full_files"] = sorted(os.listdir(d))
out["full_resumed"] = resumed(d)

# 3. Damaged files: ckpt-3's data altered, ckpt-2's data truncated, then ckpt-4's files deleted.
d = os.path.join(root, "damaged")
s, step, weights = store(d, keep=4)
save_steps(s, step, weights, [1, 2, 3])
data = lambda n: glob.glob(os.path.join(d, f"ckpt-{n}.data-*"))[0]
with open(data(3), "r+b") as f:
    f.seek(os.path.getsize(data(3)) // 2)
    byte = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([byte[0] ^ 0xFF]))
with open(data(2), "r+b") as f:
    f.truncate(os.path.getsize(data(2)) // 2)
del warnings[:]
out["damaged_resumed"] = resumed(d)
out["damaged_warnings"] = list(warnings)
out["damaged_archived"] = sorted(os.listdir(glob.glob(os.path.join(d, "archive", "*"))[0]))
s, step, weights = store(d, keep=4)
s.restore_latest()
save_steps(s, step, weights, [2, 3, 4])
for name in glob.glob(os.path.join(d, "ckpt-4.*")):
    os.remove(name)
del warnings[:]
out["missing_resumed"] = resumed(d)
out["missing_warnings"] = list(warnings)

# 4. Every checkpoint damaged: an error, nothing moved.
d = os.path.join(root, "all_damaged")
s, step, weights = store(d)
save_steps(s, step, weights, [1])
with open(data(1), "r+b") as f:
    f.truncate(100)
try:
    store(d)[0].restore_latest()
    out["all_damaged"] = None
except CheckpointError as e:
    out["all_damaged"] = str(e)
out["all_damaged_listed"] = listed(d)
print(json.dumps(out))
"""


class CheckpointFaultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(FAULTS_PROBE)

    def test_kill_between_index_update_and_deletion(self):
        r = self.r
        self.assertEqual(r["kill_status"], -9)
        self.assertEqual(r["kill_listed"], ["ckpt-2", "ckpt-3"])  # only complete checkpoints
        self.assertEqual(r["kill_readable"], [2, 3])
        self.assertIn("ckpt-1.index", r["kill_leftover"])
        self.assertEqual(r["kill_resumed"], 3)
        # The next save removes what the killed deletion left behind.
        self.assertEqual(r["kill_after_next_save"], ["ckpt-3.index", "ckpt-4.index"])

    def test_disk_full_during_save(self):
        r = self.r
        error = r["full_error"]
        self.assertIsNotNone(error)
        self.assertIn("Could not save checkpoint", error)
        self.assertIn("ckpt-3", error)
        self.assertIn("File too large", error)
        self.assertIn("ckpt-2) is intact", error)
        self.assertIn("free space", error)
        # The partial write is gone; the index still names ckpt-2.
        self.assertFalse([n for n in r["full_files"] if n.startswith("ckpt-3")], r["full_files"])
        self.assertEqual(r["full_resumed"], {"path": "ckpt-2", "step": 2, "weights": 2.0,
                                             "listed": ["ckpt-1", "ckpt-2"]})

    def test_damaged_checkpoints_are_skipped_and_archived(self):
        r = self.r
        self.assertEqual(r["damaged_resumed"], {"path": "ckpt-1", "step": 1, "weights": 1.0,
                                                "listed": ["ckpt-1"]})
        warnings = " ".join(r["damaged_warnings"])
        self.assertIn("ckpt-3: it is damaged", warnings)
        self.assertIn("Checksum does not match", warnings)
        self.assertIn("ckpt-2: it is damaged", warnings)
        self.assertIn("Resuming from", warnings)
        self.assertIn("nothing was deleted", warnings)
        for name in ("ckpt-2.index", "ckpt-3.index"):
            self.assertIn(name, r["damaged_archived"])

    def test_index_naming_missing_files_falls_back(self):
        r = self.r
        self.assertEqual(r["missing_resumed"], {"path": "ckpt-3", "step": 3, "weights": 3.0,
                                                "listed": ["ckpt-1", "ckpt-2", "ckpt-3"]})
        warnings = " ".join(r["missing_warnings"])
        self.assertIn("ckpt-4 is listed in", warnings)
        self.assertIn("its files are missing (not damaged: absent)", warnings)
        self.assertNotIn("damaged (", warnings)
        self.assertNotIn("archive", warnings)

    def test_every_checkpoint_damaged_is_an_error(self):
        r = self.r
        self.assertIn("No checkpoint in", r["all_damaged"])
        self.assertIn("ckpt-1 is damaged", r["all_damaged"])
        self.assertIn("--reset-training", r["all_damaged"])
        self.assertEqual(r["all_damaged_listed"], ["ckpt-1"])


if __name__ == "__main__":
    unittest.main()
