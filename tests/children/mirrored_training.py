"""Child process of tests/test_mirrored_training.py: one tf.distribute.MirroredStrategy update
against the one-device update on the same global batch, on three logical CPU devices (data on
/CPU:0, model replicas on /CPU:1 and /CPU:2: the plan of `--data-gpu 0 --model-gpus 1,2` on a
machine without a GPU).

    python -m tests.children.mirrored_training

Prints one JSON object (the figures the test checks) on its last stdout line. Importing this
module configures the devices before TensorFlow starts, so it runs as a process of its own: the
test run's process already has its two devices.
"""

import os
import shutil
import tempfile

from myxtts import devices
from tests.children import print_json

PLAN = devices.configure(devices.plan_devices(0, model_gpus=[1, 2], gpus=[], use_env=False))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.text import Tokenizer  # noqa: E402
from myxtts.training.distribution import Distribution  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402

TOKENIZER = Tokenizer.build(["hello world"], "english")


def make(workdir, distribution, name, mirrored, **training):
    config = XTTSConfig.from_yaml("configs/tiny.yaml")
    config.model.dropout = config.model.prenet_dropout = 0.0
    config.training.checkpoint_dir = os.path.join(workdir, name)
    config.training.warmup_steps = 0
    for key, value in training.items():
        setattr(config.training, key, value)
    return XTTSTrainer(config, model_device=PLAN.model_device, tokenizer=TOKENIZER,
                       distribution=distribution if mirrored else None)


def batch(lengths, seed, frames=24, tokens=10, nan_item=None):
    # Unequal lengths: replica 0 gets the long items, replica 1 the short ones, so a mean of
    # per-replica means would weigh frames differently from the one-device loss.
    rng = np.random.default_rng(seed)
    size = len(lengths)
    mel = rng.normal(-2.0, 1.0, (size, frames, 40)).astype(np.float32)
    if nan_item is not None:
        mel[nan_item, 2, 3] = np.nan
    with tf.device(PLAN.data_device):
        return {"tokens": tf.constant(rng.integers(1, TOKENIZER.vocab_size, (size, tokens)),
                                      tf.int32),
                "token_lengths": tf.constant([tokens - 2 * i for i in range(size)], tf.int32),
                "language_ids": tf.zeros([size], tf.int32), "mel": tf.constant(mel),
                "mel_lengths": tf.constant(lengths, tf.int32),
                "ref_mel": tf.constant(rng.normal(-2.0, 1.0, (size, 30, 40)), tf.float32),
                "ref_lengths": tf.fill([size], 30)}


def on_model_device(b):
    with tf.device(PLAN.model_device):
        return {k: tf.identity(v) for k, v in b.items()}


def components(variables):
    return [[c.numpy() for c in v.value.values] for v in variables]


def compare(single, mirrored):
    # max |difference| of weights and of optimizer variables; every mirrored copy against the
    # one-device value
    def diff(a_vars, b_vars):
        return max(float(np.max(np.abs(np.asarray(a.value.numpy(), np.float64) - c)))
                   for a, b in zip(a_vars, b_vars) for c in (x for x in b))
    return {"weights": diff(single.model.variables, components(mirrored.model.variables)),
            "optimizer": diff(single.optimizer.variables,
                              components(mirrored.optimizer.variables))}


def placement(trainer):
    step = trainer.step
    owned = {"model": trainer.model.variables, "optimizer": trainer.optimizer.variables,
             "counters": [step.step, step.micro_step, step.nonfinite_total, trainer.epoch,
                          trainer.batch_in_epoch, trainer.frames, trainer.minutes_trained]
                         + ([trainer.schedule_clock.position] if trainer.schedule_clock else []),
             "accumulators": step.accumulators}
    # Keras variables wrap a tf.Variable (here a MirroredVariable) in `.value`.
    return {name: sorted({tuple(sorted(c.device.split("/")[-1] for c in
                                       (v if isinstance(v, tf.Variable) else v.value).values))
                          for v in variables})
            for name, variables in owned.items()}


def run(distribution, single, mirrored, b):
    s = single.step(on_model_device(b))
    m = mirrored.step(distribution.distribute_batch(b))
    return {"loss": [float(s["total"]), float(m["total"])],
            "finite": [bool(s["finite"]), bool(m["finite"])],
            "loss_device": m["total"].device}


def fp32(out, workdir, distribution):
    """fp32, global batch of 4 split 2 + 2, global-norm clipping (every loss shared by the
    global counts, the guided attention's among them) and a moving average of the weights (an
    optimizer variable like the slots); two updates, the second at the learning rate of the position
    training.lr_clock's schedule clock holds (half way through the cosine: 0.5 of the peak),
    then a NaN in one replica's slice (the whole update is skipped on every replica)."""
    options = {"clip_norm": 1.0, "ema_momentum": 0.9, "lr_clock": True, "max_minutes": 60.0,
               "decay_steps": 1000, "min_lr_ratio": 0.0}
    single = make(workdir, distribution, "single", False, **options)
    mirrored = make(workdir, distribution, "mirrored", True, **options)
    mirrored.model.set_weights(single.model.get_weights())
    initial = single.model.get_weights()
    out["fp32"] = [run(distribution, single, mirrored, batch([24, 22, 8, 6], seed=0))]
    for trainer in (single, mirrored):
        trainer.schedule_clock.position.assign(500.0)
    out["clock_lr"] = [float(t.optimizer.learning_rate.numpy()) / t.config.training.learning_rate
                       for t in (single, mirrored)]
    out["fp32"].append(run(distribution, single, mirrored, batch([24, 22, 8, 6], seed=1)))
    out["fp32_norms"] = [single.step.metric_results()["grad_norm"],
                         mirrored.step.metric_results()["grad_norm"]]
    out["fp32_moved"] = max(float(np.max(np.abs(a - b)))
                            for a, b in zip(initial, single.model.get_weights()))
    out["fp32_diff"] = compare(single, mirrored)
    out["placement"] = placement(mirrored)
    before = components(mirrored.model.trainable_variables)
    out["nan"] = run(distribution, single, mirrored, batch([24, 22, 8, 6], seed=2, nan_item=3))
    out["nan_unchanged"] = all(np.array_equal(a, b) for x, y in
                               zip(before, components(mirrored.model.trainable_variables))
                               for a, b in zip(x, y))
    out["nonfinite_total"] = int(mirrored.step.nonfinite_total.numpy())
    out["frames"] = [int(single.frames.numpy()), int(mirrored.frames.numpy())]


def fp16_accumulation(out, workdir, distribution):
    """mixed_float16 with dynamic loss scaling and gradient accumulation (2 micro-batches per
    update). Each replica gets a slice of the same shape and values as the one-device
    micro-batch (the global micro-batch is that batch twice): see the test's docstring."""
    single = make(workdir, distribution, "single_fp16", False, precision="mixed_float16",
                  grad_accum_steps=2)
    mirrored = make(workdir, distribution, "mirrored_fp16", True, precision="mixed_float16",
                    grad_accum_steps=2)
    mirrored.model.set_weights(single.model.get_weights())
    for trainer in (single, mirrored):  # one that overflows neither (see the test's docstring)
        trainer.optimizer.dynamic_scale.assign(2.0 ** 10)
    losses = []
    for seed in (3, 4):
        b = batch([24, 14], seed=seed)
        with tf.device(PLAN.data_device):
            doubled = {k: tf.concat([v, v], 0) for k, v in b.items()}
        s = single.step(on_model_device(b))
        m = mirrored.step(distribution.distribute_batch(doubled))
        losses.append([float(s["total"]), float(m["total"]), bool(s["updated"]),
                       bool(m["updated"])])
    scale = [single.step.loss_scale(), mirrored.step.loss_scale()]
    nan = batch([24, 14], seed=6, nan_item=1)
    with tf.device(PLAN.data_device):
        nan_doubled = {k: tf.concat([v, v], 0) for k, v in nan.items()}
    for _ in range(2):  # one accumulated update with a NaN: skipped, the scale halves
        single.step(on_model_device(nan))
        mirrored.step(distribution.distribute_batch(nan_doubled))
    out["fp16_accum"] = {"losses": losses,
                         "scale_after_nan": [single.step.loss_scale(),
                                             mirrored.step.loss_scale()],
                         "nonfinite": [int(single.step.nonfinite_total.numpy()),
                                       int(mirrored.step.nonfinite_total.numpy())],
                         "loss_scale": scale,
                         "iterations": [int(single.optimizer.iterations.numpy()),
                                        int(mirrored.optimizer.iterations.numpy())],
                         "diff": compare(single, mirrored),
                         "optimizer": type(mirrored.optimizer).__name__,
                         "placement": placement(mirrored)}


def main() -> None:
    distribution = Distribution(PLAN)
    workdir = tempfile.mkdtemp(prefix="myxtts-mirrored-test-")
    out = {"plan": [PLAN.data_device, *PLAN.model_devices]}
    try:
        fp32(out, workdir, distribution)
        fp16_accumulation(out, workdir, distribution)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print_json(out)


if __name__ == "__main__":
    main()
