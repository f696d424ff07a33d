"""This worker's place in a multi-worker job (MultiWorkerMirroredStrategy), read from TF_CONFIG
or a Slurm job step BEFORE TensorFlow starts, so a TF_CONFIG that does not parse is one clear
error instead of a failure deep in TensorFlow's start-up. No TensorFlow import here.

The workers are the cluster's "chief" (at most one) and "worker" tasks, chief first: worker
index i reads input shard i (myxtts.data.pipeline) and the chief (index 0) is the one that
writes the run's files (myxtts.training.distribution).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Tuple

from myxtts.errors import MyXTTSError


class ClusterConfigurationError(MyXTTSError, ValueError):
    """A TF_CONFIG that cannot describe this worker; the message says what to fix."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    """This worker's place in a multi-worker job, read before TensorFlow starts."""

    source: str  # "TF_CONFIG" | "Slurm"
    task_type: str  # "chief" | "worker"
    task_index: int
    worker_index: int  # 0..workers-1, the chief (if any) first: the input shard it reads
    workers: int
    is_chief: bool
    addresses: Tuple[str, ...] = ()

    def describe(self) -> str:
        role = "chief" if self.is_chief else "worker"
        return (f"{self.source}: task {self.task_type}:{self.task_index}, worker "
                f"{self.worker_index + 1} of {self.workers} ({role})")


def read_cluster(strategy: str = "auto") -> Optional[Cluster]:
    """The cluster from TF_CONFIG (or, under --strategy multi_worker, a Slurm job step's
    SLURM_PROCID/SLURM_NTASKS); None when neither is set. A TF_CONFIG that does not describe a
    chief/worker task of its cluster is an error naming what is wrong."""
    text = os.environ.get("TF_CONFIG")
    if text is None or not text.strip():
        if strategy == "multi_worker" and "SLURM_PROCID" in os.environ:
            procid, ntasks = int(os.environ["SLURM_PROCID"]), int(os.environ.get(
                "SLURM_NTASKS", "1"))
            return Cluster("Slurm", "worker", procid, procid, ntasks, procid == 0)
        return None

    def bad(why: str) -> ClusterConfigurationError:
        return ClusterConfigurationError(
            f"TF_CONFIG cannot be used for multi-worker training: {why}. It must be JSON like "
            f'{{"cluster": {{"worker": ["10.0.0.1:12345", "10.0.0.2:12345"]}}, "task": '
            f'{{"type": "worker", "index": 0}}}} (the same cluster on every machine, each with '
            f"its own task; docs/distributed.md). Fix it, or unset TF_CONFIG to train on this "
            f"machine alone.")

    try:
        config = json.loads(text)
    except ValueError as e:
        raise bad(f"it is not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise bad("it is not a JSON object")
    cluster, task = config.get("cluster"), config.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise bad('"cluster" is missing or empty')
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise bad('"task" must give "type" and "index"')
    unknown = sorted(set(cluster) - {"chief", "worker"})
    if unknown:
        raise bad(f"cluster job(s) {', '.join(unknown)} are not supported (only chief and "
                  f"worker: every task trains)")
    jobs = {}
    for job in ("chief", "worker"):
        addresses = cluster.get(job, [])
        if (not isinstance(addresses, list) or
                any(not isinstance(a, str) or ":" not in a for a in addresses)):
            raise bad(f'cluster "{job}" must be a list of "host:port" strings')
        jobs[job] = addresses
    if len(jobs["chief"]) > 1:
        raise bad(f'there can be one chief, not {len(jobs["chief"])}')
    task_type, index = task["type"], task["index"]
    if task_type not in jobs or not isinstance(index, int) or not 0 <= index < len(jobs[task_type]):
        raise bad(f"task {task_type}:{index} is not in the cluster")
    addresses = tuple(jobs["chief"] + jobs["worker"])
    worker_index = index if task_type == "chief" else len(jobs["chief"]) + index
    return Cluster("TF_CONFIG", task_type, index, worker_index, len(addresses),
                   worker_index == 0, addresses)
