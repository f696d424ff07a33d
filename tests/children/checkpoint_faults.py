"""Child processes of tests/test_checkpoint_faults.py: the faults that belong to a process.

    python -m tests.children.checkpoint_faults kill DIRECTORY
        Saves ckpt-1 and ckpt-2 (keep=2), then ckpt-3, and SIGKILLs itself at the first file
        deletion of that save: after the index dropped ckpt-1, before its files are gone.
    python -m tests.children.checkpoint_faults disk_full DIRECTORY
        Saves ckpt-1 and ckpt-2, then ckpt-3 under a file-size limit of 64 KiB (the kernel
        refuses the writes, as on a full disk); prints {"error": the CheckpointError's message
        or null, "files": what DIRECTORY holds after it}.

Every element of the 256 x 256 weights equals the step. `disk_full` runs on the two logical CPU
devices of the test run (configured before TensorFlow starts), `kill` on TensorFlow's default.
"""

import os
import resource
import signal
import sys

from myxtts import devices
from tests.children import print_json


def kill(directory: str) -> None:
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from myxtts.training.checkpoints import CheckpointStore
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([256, 256]))
    s = CheckpointStore(directory, {"step": step, "weights": weights}, keep=2)
    for n in (1, 2):
        step.assign(n)
        s.save(n)
    os.remove = lambda path: os.kill(os.getpid(), signal.SIGKILL)
    step.assign(3)
    s.save(3)


def disk_full(directory: str) -> None:
    devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from myxtts.training.checkpoints import CheckpointError, CheckpointStore
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([256, 256]))  # every element == step
    s = CheckpointStore(directory, {"step": step, "weights": weights}, keep=3)
    for n in (1, 2):
        step.assign(n)
        weights.assign(tf.fill([256, 256], float(n)))
        s.save(n)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, limits[1]))
    step.assign(3)
    weights.assign(tf.fill([256, 256], 3.0))
    try:
        s.save(3)
        error = None
    except CheckpointError as e:
        error = str(e)
    resource.setrlimit(resource.RLIMIT_FSIZE, limits)
    print_json({"error": error, "files": sorted(os.listdir(directory))})


def main() -> None:
    fault, directory = sys.argv[1:]
    {"kill": kill, "disk_full": disk_full}[fault](directory)


if __name__ == "__main__":
    main()
