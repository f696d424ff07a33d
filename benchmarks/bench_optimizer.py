"""The optimizer's update alone: Keras AdamW against FusedAdamW (myxtts.training.optimization),
measured in one run.

    python benchmarks/bench_optimizer.py [--config configs/quick.yaml] [--repeats 3]
        [--steps 50]

For each, on the trainable variables of an untrained XTTSModel of --config, built the way the
trainer builds it (training.weight_decay, its decay exclusions, global-norm clipping, the
learning-rate schedule): the time to trace a tf.function that applies one set of gradients
(what every training process pays before its first step, on top of the model's own tracing),
and the time of one update once traced (mean of --steps). The two alternate --repeats times
and the best of each is printed, so load from other jobs hits both alike. Their updates agree
to float rounding (printed: the largest difference of any weight or slot after 3 updates).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.models.xtts import XTTSModel  # noqa: E402
from myxtts.training import optimization  # noqa: E402

VARIANTS = {"keras AdamW": keras.optimizers.AdamW, "FusedAdamW": optimization.FusedAdamW}


def build(config, optimizer_class):
    """(model variables, a built optimizer of `optimizer_class`), seeded alike."""
    keras.utils.set_random_seed(0)
    model = XTTSModel(config.model, 60, 1, config.data.n_mels)
    chosen = optimization.FusedAdamW
    optimization.FusedAdamW = optimizer_class  # build_optimizer's AdamW, as the trainer sets it
    try:
        optimizer = optimization.build_optimizer(config.training, model, False)
    finally:
        optimization.FusedAdamW = chosen
    return model.trainable_variables, optimizer


def measure(config, optimizer_class, steps: int):
    """(trace seconds, seconds per update, the variables and slots after 3 updates)."""
    variables, optimizer = build(config, optimizer_class)
    rng = np.random.default_rng(0)
    grads = [[tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
             for _ in range(3)]

    @tf.function
    def update(gradients):
        optimizer.apply(gradients, variables)

    start = time.perf_counter()
    update.get_concrete_function(grads[0])
    trace = time.perf_counter() - start
    for g in grads:
        update(g)
    state = [v.numpy() for v in variables + optimizer._momentums  # pylint: disable=protected-access
             + optimizer._velocities]  # pylint: disable=protected-access
    start = time.perf_counter()
    for _ in range(steps):
        update(grads[0])
    return trace, (time.perf_counter() - start) / steps, state


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "quick.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    config = XTTSConfig.from_yaml(args.config)
    keras.mixed_precision.set_global_policy("float32")
    best, states = {}, {}
    for _ in range(args.repeats):
        for name, optimizer_class in VARIANTS.items():
            trace, step, states[name] = measure(config, optimizer_class, args.steps)
            old = best.get(name, (np.inf, np.inf))
            best[name] = (min(old[0], trace), min(old[1], step))
    variables = len(build(config, keras.optimizers.AdamW)[0])
    print(f"{os.path.relpath(args.config)}: {variables} trainable variables, weight decay "
          f"{config.training.weight_decay}, clip norm {config.training.clip_norm}; best of "
          f"{args.repeats}")
    for name, (trace, step) in best.items():
        print(f"  {name:<12} trace {trace:6.2f} s   update {1000 * step:6.2f} ms")
    (trace0, step0), (trace1, step1) = best.values()
    print(f"  FusedAdamW / keras AdamW: trace {trace1 / trace0:.2f}x, update {step1 / step0:.2f}x")
    difference = max(float(np.abs(a - b).max()) for a, b in zip(*states.values()))
    print(f"  largest difference of a weight or slot after 3 updates: {difference:.2e}")


if __name__ == "__main__":
    main()
