"""Several machines (tf.distribute.MultiWorkerMirroredStrategy), as two worker processes on this
machine with TF_CONFIG on loopback ports: each worker has its own data device (/CPU:1) and model
device (/CPU:0, MultiWorkerMirroredStrategy's replica) and trains on its own shard of the files.

The test runs `train_main.py` itself in both processes (through tests/children/multi_worker.py,
which prints a digest of the trained weights when `fit` returns) and checks that
  * the job resumes after a worker is killed: the chief had saved checkpoints, worker 1 gets
    SIGKILL, worker 0 is stopped too (its next all-reduce cannot complete), both are started
    again and both resume from the chief's last checkpoint;
  * both workers end with bit-identical weights;
  * only the chief wrote into --checkpoint-dir: its TensorBoard event files are the chief's
    (named by process id), and worker 1's own directory was a temporary one, removed at exit.

Both processes always run (no multi_process_runner, nothing to skip); every wait has a
deadline and a failure shows both workers' logs.

    python -m pytest tests/test_multi_worker.py -v
"""

import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import yaml

from tests import children
from tests.device_harness import REPO
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

def free_ports(count):
    """Loopback ports the kernel reports free (bound to port 0, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def latest_step(directory):
    path = os.path.join(directory, "checkpoint")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        match = re.search(r'model_checkpoint_path: "ckpt-(\d+)"', f.read())
    return int(match.group(1)) if match else None


class MultiWorkerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="myxtts_multi_worker_")
        cls.data = os.path.join(cls.work, "data")
        shutil.copytree(os.path.join(REPO, "samples", "ljspeech_sample"), cls.data,
                        ignore=shutil.ignore_patterns(".myxtts_cache"))
        with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
            config = yaml.safe_load(f)
        config["data"]["num_buckets"] = 1  # one step shape to trace
        config["training"].update(checkpoint_every_steps=2, validate_every_steps=1000,
                                  log_every_steps=2)
        cls.config = os.path.join(cls.work, "multi_worker.yaml")
        with open(cls.config, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f)
        cls.run_dir = os.path.join(cls.work, "run")
        cls.logs = []

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def start(self, max_steps):
        ports = free_ports(2)
        workers = []
        for index in range(2):
            tf_config = {"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                         "task": {"type": "worker", "index": index}}
            env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), CUDA_VISIBLE_DEVICES="",
                       PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
            log = open(os.path.join(self.work, f"worker{index}-{len(self.logs)}.log"), "w+",
                       encoding="utf-8")
            self.logs.append(log)
            workers.append((subprocess.Popen(
                children.command("multi_worker", "--config", self.config,
                                 "--train-data", self.data, "--checkpoint-dir", self.run_dir,
                                 "--max-steps", max_steps, "--data-gpu", "0", "--model-gpu", "1"),
                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT), log))
        return workers

    def output(self, log):
        log.flush()
        log.seek(0)
        return log.read()

    def fail_with_logs(self, message, workers):
        for process, _ in workers:
            if process.poll() is None:
                process.kill()
        tails = "\n".join(f"--- worker {i} ---\n{self.output(log)[-3000:]}"
                          for i, (_, log) in enumerate(workers))
        self.fail(f"{message}\n{tails}")

    def wait_all(self, workers, deadline):
        for process, _ in workers:
            try:
                process.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail_with_logs("a worker did not finish in time", workers)

    def test_kill_restart_resume_identical_weights_chief_writes(self):
        # 1. Train until the chief has saved ckpt-4, then kill worker 1 (SIGKILL) and stop
        #    worker 0, which cannot complete an all-reduce without it.
        workers = self.start(max_steps=1000)
        deadline = time.monotonic() + 420
        while (latest_step(self.run_dir) or 0) < 4:
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in workers):
                self.fail_with_logs("the chief saved no ckpt-4", workers)
            time.sleep(0.5)
        first_pids = [p.pid for p, _ in workers]
        workers[1][0].kill()
        workers[1][0].wait()
        try:
            workers[0][0].wait(20)
        except subprocess.TimeoutExpired:
            workers[0][0].send_signal(signal.SIGKILL)
            workers[0][0].wait()
        resumed = latest_step(self.run_dir)
        # SIGKILL left worker 1's temporary directory behind (nothing runs at a SIGKILL).
        killed_dir = re.search(r"writes .* to (\S+) \(removed at exit\)",
                               self.output(workers[1][1])).group(1)
        shutil.rmtree(killed_dir)

        # 2. Restart both: they resume from the chief's last checkpoint and train 2 steps.
        workers = self.start(max_steps=resumed + 2)
        self.wait_all(workers, time.monotonic() + 420)
        outputs = [self.output(log) for _, log in workers]
        for process, _ in workers:
            if process.returncode != 0:
                self.fail_with_logs(f"exit status {process.returncode}", workers)
        checkpoint = os.path.join(self.run_dir, f"ckpt-{resumed}")
        self.assertIn(f"Resumed from {checkpoint} at step {resumed}", outputs[0])
        self.assertIn(f"Resumed from the chief's {checkpoint} at step {resumed}", outputs[1])
        results = [json.loads(re.search(r"WORKER_RESULT (.*)", out).group(1))
                   for out in outputs]

        # Identical weights, the same step.
        self.assertEqual([r["step"] for r in results], [resumed + 2] * 2)
        self.assertEqual(results[0]["digest"], results[1]["digest"])

        # Only the chief wrote into --checkpoint-dir.
        self.assertEqual(results[0]["directory"], self.run_dir)
        self.assertNotEqual(results[1]["directory"], self.run_dir)
        self.assertFalse(os.path.exists(results[1]["directory"]))
        self.assertEqual(latest_step(self.run_dir), resumed + 2)
        writers = {int(name.split(".")[-3]) for name in glob.glob(
            os.path.join(self.run_dir, "tensorboard", "train", "events.out.tfevents.*"))}
        self.assertEqual(writers, {first_pids[0], workers[0][0].pid})


if __name__ == "__main__":
    unittest.main()
