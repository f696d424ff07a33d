"""tf.data service: a dispatcher and two workers as real processes on 127.0.0.1
(`python -m myxtts.data_service ...`); an epoch read through them gives every training utterance
exactly once, train_main.py --data-service trains from them, and a worker killed mid-epoch stops
the feeder with the documented message instead of a silent hang."""

import collections
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from tests.logical_devices import PLAN  # noqa: F401  first: configures the devices

import tensorflow as tf  # noqa: E402,F401

from myxtts.data import cache as cache_lib  # noqa: E402
from myxtts.data.feeder import DataStalled  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402
from tests.data_samples import REPO, TINY, copy_sample_rows, tiny_config, write_metadata  # noqa: E402
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

ENV = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def utterance_keys(batch):
    """The distinct utterances of a batch (the fill repeats some), by their mel's bytes."""
    return {hashlib.sha1(batch["mel"][i, :batch["mel_lengths"][i]].numpy().tobytes()).hexdigest()
            for i in range(batch["mel"].shape[0])}


class Service:
    """A dispatcher and `workers` worker processes on 127.0.0.1."""

    def __init__(self, workers: int):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dispatcher = self._start("dispatcher", "--port", str(self.port))
        self._wait_listening(self.port)
        self.workers = [self._start("worker", "--dispatcher", self.address,
                                    "--port", str(free_port())) for _ in range(workers)]
        self.log = []

    def _start(self, *args):
        return subprocess.Popen([sys.executable, "-m", "myxtts.data_service", *args], cwd=REPO,
                                env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)

    @staticmethod
    def _wait_listening(port, timeout=60.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"nothing listens on {port} after {timeout} s")

    def wait_workers(self):
        for worker in self.workers:
            line = worker.stderr.readline()
            while line and "LISTENING" not in line:
                line = worker.stderr.readline()
            assert "LISTENING" in line, "a worker did not start"

    def stop(self):
        """SIGTERM to each process; each must exit 0 on its own."""
        codes = []
        for process in [self.dispatcher, *self.workers]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [self.dispatcher, *self.workers]:
            try:
                codes.append(process.wait(timeout=20))
            except subprocess.TimeoutExpired:
                process.kill()
                codes.append("hung")
            process.stderr.close()
        return codes


class DataServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data")
        write_metadata(cls.data, copy_sample_rows(cls.data, 58))
        cls.service = Service(workers=2)

    @classmethod
    def tearDownClass(cls):
        codes = cls.service.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert all(c in (0, -9) for c in codes), codes  # the killed worker: -9

    def pipeline(self, **overrides):
        saved = cache_lib.ITEMS_PER_SHARD
        cache_lib.ITEMS_PER_SHARD = 8  # several shards: the dispatcher hands them out
        try:
            return InputPipeline(tiny_config(feature_mode="cached", val_fraction=0.1,
                                             data_service=self.service.address, **overrides),
                                 self.data, work_dir=os.path.join(self.tmp, "run"))
        finally:
            cache_lib.ITEMS_PER_SHARD = saved

    def test_a_epoch_through_the_service_gives_every_utterance_once(self):
        self.service.wait_workers()
        pipeline = self.pipeline()
        local = [b for b in pipeline._cached_elements("train", 0, True)]
        expected = set().union(*map(utterance_keys, local))
        self.assertEqual(len(expected), len(pipeline.items["train"]))
        batches = list(pipeline.train_dataset(0))
        seen = collections.Counter(k for b in batches for k in utterance_keys(b))
        self.assertEqual(set(seen), expected)
        self.assertEqual(max(seen.values()), 1)  # exactly once across the two workers
        self.assertGreaterEqual(len(batches), pipeline.train_steps_per_epoch)
        shapes = {(b.frames, b.max_tokens, b.batch_size) for b in pipeline.buckets}
        for b in batches:  # each batch is one bucket's static shape
            self.assertIn((b["mel"].shape[1], b["tokens"].shape[1], b["mel"].shape[0]), shapes)
            self.assertTrue(b["mel"].device.endswith("CPU:0"))  # prefetched to the data device
        self.assertIsNotNone(pipeline.val_dataset())  # validation stays local

    def test_b_train_main_trains_from_the_service(self):
        config = os.path.join(self.tmp, "tiny_cached.yaml")
        with open(TINY, encoding="utf-8") as f, open(config, "w", encoding="utf-8") as out:
            out.write(f.read().replace("data:\n", "data:\n  feature_mode: cached\n", 1))
        run = os.path.relpath(os.path.join(self.tmp, "runs", "svc"), REPO)
        data = os.path.relpath(self.data, REPO)
        done = subprocess.run(
            [sys.executable, "train_main.py", "--config", os.path.relpath(config, REPO),
             "--train-data", data, "--checkpoint-dir", run, "--max-steps", "3",
             "--data-service", self.service.address],
            cwd=REPO, env=ENV, capture_output=True, text=True, timeout=240)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("tf.data service: epoch 1's training batches come from the workers",
                      done.stderr)
        self.assertIn("Trained to step 3", done.stdout)

    def test_c_killed_worker_stops_the_feeder_with_the_documented_message(self):
        pipeline = self.pipeline()
        pipeline.service_stall_seconds = 8.0
        got, outcome = 0, "complete"
        with pipeline.train_batches(1, "/CPU:1") as feeder:
            try:
                for _ in feeder:
                    got += 1
                    if got == 1:
                        self.service.workers[0].kill()
                        self.service.workers[0].wait()
            except DataStalled as e:
                outcome = str(e)
        # TF 2.21 waits for the dead worker's shards: the feeder gives up with the message;
        # when the dead worker had already handed over everything, the epoch completes.
        if outcome != "complete":
            self.assertIn("No batch for 8 s", outcome)
            self.assertIn("run the same command again", outcome)
        self.assertGreaterEqual(got, 1)


if __name__ == "__main__":
    unittest.main()
