"""Child process of tests/test_checkpoints.py: saves checkpoints of ~24 MB into DIRECTORY as fast
as it can, printing each step, until it is killed (SIGKILL at a random moment, by the test).

    python -m tests.children.checkpoints DIRECTORY

Prints `start N` (the step it resumed at, 0 in an empty DIRECTORY), then `saved N` after each
save. Every element of the six 1000 x 1000 weights equals the step.
"""

import sys

import tensorflow as tf

from myxtts.training.checkpoints import CheckpointStore


def main() -> None:
    directory = sys.argv[1]
    step = tf.Variable(0, dtype=tf.int64)
    weights = [tf.Variable(tf.zeros([1000, 1000])) for _ in range(6)]  # every element == step
    store = CheckpointStore(directory, {"step": step, "weights": weights}, keep=3)
    if store.latest:
        store.restore(store.latest)
    print("start", int(step.numpy()), flush=True)
    while True:
        step.assign_add(1)
        for w in weights:
            w.assign_add(tf.ones_like(w))
        store.save(int(step.numpy()))
        print("saved", int(step.numpy()), flush=True)


if __name__ == "__main__":
    main()
