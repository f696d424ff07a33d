"""The tf.distribute strategy over the model devices (docs/distributed.md).

    distribution = Distribution(plan)         # right after myxtts.devices.configure(plan)
    with distribution.scope(): ...            # model, optimizer, counters: MirroredVariables
    per_replica = distribution.distribute_batch(batch)   # the data device's batch, one slice
                                                         # per replica, on the replica's device

MirroredStrategy over this machine's model devices (plan.strategy "mirrored"), or
MultiWorkerMirroredStrategy across machines ("multi_worker", the cluster from TF_CONFIG or a
Slurm job step). MultiWorkerMirroredStrategy takes the worker's first local GPUs (or /CPU:0) as
its replicas; the device plan numbers the model GPUs first for that reason, and the cluster
resolver below says how many of the visible GPUs are model GPUs (TFConfigClusterResolver alone
would count the data GPU too).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
from typing import Dict

import tensorflow as tf

from myxtts.devices import DevicePlan
from myxtts.run_directory import MODEL_INFO_FILE, SPLIT_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts.training")

# What a worker that is not the chief copies from the run directory into its own: what the run
# reads back (vocabulary, validation split, statistics, warm-start record).
RUN_FILES = (VOCAB_FILE, SPLIT_FILE, MODEL_INFO_FILE)


def _cluster_resolver(plan: DevicePlan):
    if plan.cluster.source == "Slurm":
        base = tf.distribute.cluster_resolver.SlurmClusterResolver(auto_set_gpu=False)
    else:
        base = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    gpus = len(plan.model_devices) if plan.uses_gpu else 0
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        base.cluster_spec(), task_type=base.task_type, task_id=base.task_id,
        rpc_layer=base.rpc_layer or "grpc", num_accelerators={"GPU": gpus} if gpus else {})


class Distribution:
    """A strategy over the plan's model devices, and this worker's place in the job."""

    def __init__(self, plan: DevicePlan):
        self.plan = plan
        if plan.strategy == "mirrored":
            self.strategy = tf.distribute.MirroredStrategy(devices=list(plan.model_devices))
        elif plan.strategy == "multi_worker":
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=_cluster_resolver(plan))
        else:
            raise ValueError(f"plan {plan.mode} has no tf.distribute strategy")
        cluster = plan.cluster
        self.worker_index = cluster.worker_index if cluster else 0
        self.num_workers = cluster.workers if cluster else 1
        self.is_chief = cluster.is_chief if cluster else True
        # This worker's replicas, full names (/job:worker/replica:0/task:1/device:GPU:0 ...).
        self.replica_devices = tuple(self.strategy.extended.worker_devices)
        self.local_replicas = len(self.replica_devices)
        self.replicas = self.strategy.num_replicas_in_sync
        self._directories: Dict[str, str] = {}
        logger.info("%s: %d replica(s) in sync (%d on this machine: %s)%s.",
                    type(self.strategy).__name__, self.replicas, self.local_replicas,
                    ", ".join(self.replica_devices),
                    f"; {cluster.describe()}" if cluster else "")

    @property
    def primary_device(self) -> str:
        """The first model device: validation, the run's metrics and the loop's reads."""
        return self.plan.model_device

    @property
    def data_device(self) -> str:
        return self.plan.data_device

    def scope(self):
        return self.strategy.scope()

    def distribute_batch(self, batch: Dict[str, tf.Tensor]):
        """This machine's batch (on the data device) → a PerReplica dict: replica i gets the
        i-th of `local_replicas` equal slices along the batch axis, copied to its device.
        Bucket batch sizes are multiples of `local_replicas` (InputPipeline(replicas=...)), so
        every replica gets the same padded shape."""
        with tf.device(self.data_device):
            slices = {k: tf.split(v, self.local_replicas) for k, v in batch.items()}

        def value_fn(context):
            local = context.replica_id_in_sync_group % self.local_replicas
            with tf.device(self.replica_devices[local]):
                return {k: tf.identity(v[local]) for k, v in slices.items()}

        return self.strategy.experimental_distribute_values_from_function(value_fn)

    def writable_directory(self, run_directory: str) -> str:
        """Where this worker writes the run's files: `run_directory` on the chief; on the other
        workers a temporary directory (the same one for every call), holding copies of the
        run's RUN_FILES and removed when the process exits."""
        if self.is_chief:
            return run_directory
        if run_directory not in self._directories:
            path = tempfile.mkdtemp(prefix=f"myxtts-worker{self.worker_index}-")
            atexit.register(shutil.rmtree, path, ignore_errors=True)
            for name in RUN_FILES:
                source = os.path.join(run_directory, name)
                if os.path.isfile(source):
                    shutil.copyfile(source, os.path.join(path, name))
            logger.info("Worker %d is not the chief: it writes its checkpoints, TensorBoard "
                        "events and model_info.json to %s (removed at exit); %s is the chief's.",
                        self.worker_index, path, run_directory)
            self._directories[run_directory] = path
        return self._directories[run_directory]
