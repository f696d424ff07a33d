"""tf.data service: training batches produced by worker processes (possibly on other machines).

    dispatcher = start_dispatcher(port, work_dir=None)        # DispatchServer, started
    worker = start_worker("host:port", port=0, host=None)      # WorkerServer, started
    dataset = distribute(dataset, "host:port", job_name("tiny-1a2b3c4d", epoch))

`InputPipeline` (pipeline.py) calls `distribute` on the training split's bucketed, padded
dataset when `data.data_service` is set; `python -m myxtts.data_service dispatcher|worker`
starts the servers. docs/data.md, "tf.data service", states the rules:

- Processing mode: `ShardingPolicy.DYNAMIC` ("distributed_epoch"). The dispatcher hands the
  cache's TFRecord shards (256 utterances each) to whichever worker asks next, so every
  utterance of an epoch is produced exactly once across the workers while they all live, and
  no fixed list of workers is needed (static sharding needs one in the dispatcher, and at
  least one shard per worker).
- One job per epoch and client process: `myxtts-<run>-<token>-epoch<N>`. A restarted client
  gets a new token, so it starts a new job rather than joining what is left of the old one
  (which the dispatcher forgets once nobody reads it).
- A worker killed mid-epoch: the shards it held are lost for that epoch (each utterance at
  most once); see docs/data.md for what TensorFlow 2.21 does and what the trainer makes of it.

Imports TensorFlow only inside the functions that start or use a server, so addresses can be
checked before TensorFlow is imported (train_main.py).
"""

from __future__ import annotations

import re
import secrets
import socket
from typing import Optional, Tuple

from myxtts.errors import MyXTTSError

# Each utterance of an epoch exactly once across the workers: the dispatcher hands out the
# TFRecord shards one at a time (see the module docstring and docs/data.md).
PROCESSING_MODE = "distributed_epoch"
# A training feeder that gets no batch from the service for this long stops the run with a
# clear message (TF 2.21 waits forever for a worker that died mid-epoch).
STALL_SECONDS = 120.0
_ADDRESS = re.compile(r"^(?:grpc://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class DataServiceError(MyXTTSError, ValueError):
    """A tf.data service address or setup problem the user can fix."""


def parse_address(value: str) -> Tuple[str, int]:
    """(host, port) of "HOST:PORT" (an optional grpc:// prefix is accepted); DataServiceError
    saying what is expected otherwise."""
    match = _ADDRESS.match((value or "").strip())
    port = int(match.group(2)) if match else 0
    if not match or not 0 < port < 65536:
        raise DataServiceError(
            f"{value!r} is not a tf.data service address: expected HOST:PORT, e.g. "
            f"127.0.0.1:5050 or dataserver:5050 (the dispatcher's host and the --port it was "
            f"started with: python -m myxtts.data_service dispatcher --port 5050).")
    return match.group(1).strip("[]"), port


def target(address: str) -> str:
    """The service target TensorFlow takes: grpc://HOST:PORT."""
    host, port = parse_address(address)
    return f"grpc://{host}:{port}" if ":" not in host else f"grpc://[{host}]:{port}"


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """DataServiceError unless something accepts TCP connections at `address` (the dispatcher);
    cheap, so a wrong address fails before the dataset is validated and cached."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as e:
        raise DataServiceError(
            f"No tf.data service dispatcher answers at {host}:{port} ({e.strerror or e}). "
            f"Start one there with `python -m myxtts.data_service dispatcher --port {port}` "
            f"and at least one worker with `python -m myxtts.data_service worker --dispatcher "
            f"{host}:{port}`, or leave out the data service to read the data locally."
        ) from None


def run_token() -> str:
    """A new random token per client process (part of every job name it creates)."""
    return secrets.token_hex(4)


def job_name(run: str, epoch: int) -> str:
    """The service job of one epoch of one client process, e.g. myxtts-tiny-1a2b3c4d-epoch3
    (`epoch` counted from 1 as in the logs)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", run).strip("_") or "run"
    return f"myxtts-{clean}-epoch{epoch}"


def distribute(dataset, address: str, name: str):
    """`dataset` produced by the service's workers: one job named `name`, each utterance of the
    epoch once across the workers (ShardingPolicy.DYNAMIC over the TFRecord files). The
    dataset must be pure TensorFlow ops (no tf.numpy_function / tf.py_function): it is
    serialised and run by the workers."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.DYNAMIC,
        service=target(address), job_name=name))


def block_shuffle(dataset, size: int, seed: int):
    """`dataset` (of strings, e.g. serialised records) in blocks of `size` consecutive
    elements, each block in a random order seeded by `seed` and the block's first element.

    Under ShardingPolicy.DYNAMIC, TensorFlow 2.21 lets every worker produce the whole epoch
    when a `shuffle()` comes before `group_by_window` (measured: 2 workers gave each utterance
    twice); a stateless shuffle inside blocks keeps each utterance once. The dispatcher hands
    out the shards in no fixed order, which mixes the epoch further."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    def shuffled(block):
        first = tf.strings.to_hash_bucket_fast(block[0], 2 ** 62)
        return tf.random.experimental.stateless_shuffle(
            block, seed=tf.stack([tf.constant(seed, tf.int64), first]))

    return dataset.batch(max(1, size)).map(shuffled).unbatch()


def start_dispatcher(port: int, work_dir: Optional[str] = None):
    """A started DispatchServer on `port` (0: any free port). With `work_dir` it journals its
    state there (fault-tolerant mode) and a restarted dispatcher recovers its jobs from it."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=bool(work_dir))
    return tf.data.experimental.service.DispatchServer(config)


def worker_host(dispatcher: str, host: Optional[str] = None) -> str:
    """The name clients reach a worker by: `host`, else localhost when the dispatcher is on
    this machine's loopback, else this machine's host name."""
    if host:
        return host
    dispatcher_host, _ = parse_address(dispatcher)
    if dispatcher_host in ("localhost", "::1") or dispatcher_host.startswith("127."):
        return "localhost"
    return socket.gethostname()


def start_worker(dispatcher: str, port: int = 0, host: Optional[str] = None):
    """A started WorkerServer on `port` (0: any free port) that registers with the dispatcher
    at `dispatcher` (HOST:PORT) and tells clients to reach it at worker_host(...):port."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    name = worker_host(dispatcher, host)
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=target(dispatcher)[len("grpc://"):], worker_address=f"{name}:%port%",
        port=port)
    return tf.data.experimental.service.WorkerServer(config)


def bound_port(server) -> int:
    """The port a started DispatchServer or WorkerServer listens on."""
    return int(server._address.rsplit(":", 1)[1])  # pylint: disable=protected-access
