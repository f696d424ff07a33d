"""The feature cache survives a kill while it is built and never serves a damaged shard."""

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import unittest
from unittest import mock

import tensorflow as tf

from myxtts.data import cache as cache_lib
from myxtts.data.prepare import prepare_dataset
from tests import children
from tests.data_samples import copy_sample_rows, tiny_config, write_metadata

UTTERANCES = 10
PER_SHARD = 2


def record_ids(shard: str):
    return [tf.train.Example.FromString(r.numpy()).features.feature["id"].bytes_list.value[0]
            .decode() for r in tf.data.TFRecordDataset(shard)]


class FeatureCacheTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = tempfile.mkdtemp()
        write_metadata(cls.data, copy_sample_rows(cls.data, UTTERANCES))
        cls.config = tiny_config(feature_mode="cached", val_fraction=0.0, num_workers=1)
        cls.items = prepare_dataset(cls.config, cls.data).items["train"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.data, ignore_errors=True)

    def setUp(self):
        self.cache_dir = tempfile.mkdtemp()
        patch = mock.patch.object(cache_lib, "ITEMS_PER_SHARD", PER_SHARD)
        patch.start()
        self.addCleanup(patch.stop)
        self.addCleanup(shutil.rmtree, self.cache_dir, True)

    def build(self):
        return cache_lib.ensure_cache(self.items, "train", self.config.data, self.cache_dir,
                                      "/CPU:0")

    def assert_complete(self, shards):
        self.assertEqual(len(shards), -(-len(self.items) // PER_SHARD))
        ids = [uid for shard in shards for uid in record_ids(shard)]
        self.assertEqual(ids, [it.id for it in self.items])
        folder = os.path.dirname(shards[0])
        self.assertTrue(os.path.isfile(os.path.join(folder, "index.json")))
        self.assertEqual(glob.glob(os.path.join(folder, "*.part")), [])

    def test_a_killed_build_keeps_its_finished_shards_and_the_next_start_builds_the_rest(self):
        proc = subprocess.run(children.command("feature_cache", self.data, self.cache_dir, 2),
                              cwd=children.REPO, env=children.env(), capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(proc.returncode, -signal.SIGKILL, proc.stderr[-3000:])
        folder = glob.glob(os.path.join(self.cache_dir, "features-train-*"))[0]
        done = sorted(glob.glob(os.path.join(folder, "*.tfrecord")))
        self.assertEqual(len(done), 2)  # shards 0 and 1; shard 2 died as a .part file
        self.assertTrue(glob.glob(os.path.join(folder, "*.part")))
        self.assertFalse(os.path.exists(os.path.join(folder, "index.json")))
        stamps = {path: os.stat(path).st_mtime_ns for path in done}

        with self.assertLogs("myxtts.data", "INFO") as logs:
            shards = self.build()
        self.assertIn("2 of 5 shards are done", "\n".join(logs.output))
        self.assert_complete(shards)
        self.assertEqual({p: os.stat(p).st_mtime_ns for p in done}, stamps)  # kept, not rebuilt

    def test_a_damaged_shard_is_rebuilt_and_a_copied_one_kept(self):
        shards = self.build()
        original = {path: open(path, "rb").read() for path in shards}
        with open(shards[1], "r+b") as f:  # flip bytes inside a record, same size
            f.seek(len(original[shards[1]]) // 2)
            f.write(bytes(b ^ 0xFF for b in original[shards[1]][len(original[shards[1]]) // 2:
                                                                 len(original[shards[1]]) // 2 + 8]))
        with open(shards[3], "r+b") as f:  # truncated
            f.truncate(100)
        os.utime(shards[4], ns=(10 ** 18, 10 ** 18))  # copied: new mtime, same bytes

        with self.assertLogs("myxtts.data", "WARNING") as logs:
            again = self.build()
        self.assertEqual(again, shards)
        self.assertIn("2 damaged or missing shard(s)", "\n".join(logs.output))
        for path in shards:
            with open(path, "rb") as f:
                self.assertEqual(f.read(), original[path], path)
        self.assertEqual(os.stat(shards[4]).st_mtime_ns, 10 ** 18)  # checked by CRC, kept
        self.assert_complete(again)
        with self.assertNoLogs("myxtts.data", "WARNING"):
            self.build()


if __name__ == "__main__":
    unittest.main()
