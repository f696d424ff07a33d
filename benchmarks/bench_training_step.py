"""Training-step benchmark; each comparison is measured in one run:

  1. (default) the step fed by the real input pipeline (data device → feeder → model device)
     vs the same step on batches already staged on the model device, for each feature mode
     (goal: <= 1.10x for configs/small.yaml on a 2-core CPU, raw and cached);
  2. --xla-vs-plain: the XLA-compiled step vs the plain tf.function step, on staged batches;
  3. --cpu-kernels: the staged step with TensorFlow's oneDNN CPU kernels vs its own kernels
     (TF_ENABLE_ONEDNN_OPTS=1 / 0, read when TensorFlow starts: each in a process of its own;
     devices.choose_cpu_kernels);
  4. --loop-overhead: the host time XTTSTrainer.fit spends around each step when it reads the
     step's scalars back every step (as it used to) vs only at log points (as it does), with a
     trivial model whose step is so short that the loop's own overhead dominates.

    python benchmarks/bench_training_step.py [--config configs/small.yaml]
        [--train-data samples/ljspeech_sample] [--epochs 3] [--feature-modes raw,cached]
        [--noxla] [--xla-vs-plain] [--cpu-kernels [--repeats 3]] [--data-gpu 0 --model-gpu 1]
    python benchmarks/bench_training_step.py --loop-overhead [--steps 2000] [--repeats 5]

Every bucket shape is compiled before timing. Pipeline and staged epochs alternate (and the
loop variants run round-robin, best of --repeats), so load from other jobs hits both alike.
Like the trainer, a timed epoch reads nothing back from the model device until its end.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts import devices  # noqa: E402  (no TensorFlow yet)
from myxtts.config import XTTSConfig  # noqa: E402


def _epoch_seconds_per_step(trainer, batches) -> float:
    """Steps over `batches` (an iterable); wall seconds per step, the last step finished."""
    started = time.perf_counter()
    count = 0
    for batch in batches:
        trainer.step(batch)
        count += 1
    trainer.step.step.numpy()  # the trainer's log point: waits for the queued steps
    return (time.perf_counter() - started) / count


def pipeline_vs_staged(config, args, plan, work: str) -> None:
    from myxtts.data.pipeline import InputPipeline  # pylint: disable=import-outside-toplevel
    from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel

    trainer = None
    for mode in args.feature_modes.split(","):
        config.data.feature_mode = mode
        pipeline = InputPipeline(config, args.train_data, data_device=plan.data_device,
                                 work_dir=work)
        if trainer is None:
            config.training.checkpoint_dir = os.path.join(work, "step")
            trainer = XTTSTrainer(config, model_device=plan.model_device,
                                  tokenizer=pipeline.tokenizer)
        with pipeline.train_batches(0, plan.model_device) as feeder:
            staged = list(feeder)  # featurized, on the model device: the "already staged" input
        started = time.perf_counter()
        _epoch_seconds_per_step(trainer, staged)  # compiles every bucket shape
        print(f"feature mode {mode}: {len(staged)} batches per epoch, staged on "
              f"{staged[0]['mel'].device}, model variables on "
              f"{trainer.model.variables[0].value.device}; compiling "
              f"{len({b['mel'].shape[1] for b in staged})} bucket shapes + first epoch: "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        piped, on_device, wait = [], [], 0.0
        for epoch in range(1, args.epochs + 1):
            with pipeline.train_batches(epoch, plan.model_device) as feeder:
                feeder.wait_until_filled(5.0)  # as --model-start-delay would
                piped.append(_epoch_seconds_per_step(trainer, feeder))
                wait += feeder.wait_seconds
            on_device.append(_epoch_seconds_per_step(trainer, staged))
        piped_ms, staged_ms = 1e3 * statistics.mean(piped), 1e3 * statistics.mean(on_device)
        print(f"  {mode:>6}: real pipeline {piped_ms:8.1f} ms/step (waited for data "
              f"{wait:.2f} s in {args.epochs * len(staged)} steps); staged on "
              f"{plan.model_device} {staged_ms:8.1f} ms/step; pipeline / staged "
              f"{piped_ms / staged_ms:.3f}x (goal <= 1.10x)", flush=True)
    if args.xla_vs_plain:
        xla_vs_plain(config, plan, work, pipeline, staged)


def xla_vs_plain(config, plan, work: str, pipeline, staged) -> None:
    from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel

    trainers = {}
    for xla in (True, False):
        config.training.xla = xla
        config.training.checkpoint_dir = os.path.join(work, "xla" if xla else "plain")
        trainers[xla] = XTTSTrainer(config, model_device=plan.model_device,
                                    tokenizer=pipeline.tokenizer)
        _epoch_seconds_per_step(trainers[xla], staged)  # compiles / traces every bucket shape
    times = {True: [], False: []}
    for _ in range(3):
        for xla, t in trainers.items():
            times[xla].append(_epoch_seconds_per_step(t, staged))
    xla_ms, plain_ms = 1e3 * min(times[True]), 1e3 * min(times[False])
    print(f"XLA step: {xla_ms:7.2f} ms/step; non-XLA step: {plain_ms:7.2f} ms/step; "
          f"non-XLA / XLA ratio: {plain_ms / xla_ms:.2f}x")


def cpu_kernels(args) -> None:
    """This script's staged step in processes of oneDNN's kernels and of TensorFlow's own, the two
    alternating for --repeats rounds (best of each), so that load from other jobs hits both."""
    command = [sys.executable, os.path.abspath(__file__), "--config", args.config,
               "--train-data", args.train_data, "--epochs", str(args.epochs),
               "--feature-modes", args.feature_modes.split(",")[0]] + (
                   ["--noxla"] if args.noxla else [])
    ms = {"oneDNN": [], "TensorFlow's own": []}
    for round_ in range(1, args.repeats + 1):
        for setting, name in (("1", "oneDNN"), ("0", "TensorFlow's own")):
            proc = subprocess.run(command, capture_output=True, text=True,
                                  env=dict(os.environ, TF_ENABLE_ONEDNN_OPTS=setting))
            found = re.search(r"staged on \S+ +([\d.]+) ms/step", proc.stdout)
            if proc.returncode != 0 or not found:
                sys.exit(f"the {name} run failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
            ms[name].append(float(found.group(1)))
            print(f"round {round_}: {name:>16} kernels (TF_ENABLE_ONEDNN_OPTS={setting}): "
                  f"staged step {ms[name][-1]:8.1f} ms", flush=True)
    own, onednn = min(ms["TensorFlow's own"]), min(ms["oneDNN"])
    print(f"best of {args.repeats}: TensorFlow's own {own:.1f} ms, oneDNN {onednn:.1f} ms; "
          f"TensorFlow's own / oneDNN: {own / onednn:.2f}x")


def loop_overhead(args, plan, work: str) -> None:
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel

    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
    tc = config.training
    tc.xla = False
    tc.checkpoint_dir = work
    tc.log_every_steps = 50  # the training default
    tc.checkpoint_every_steps = tc.validate_every_steps = 10 ** 9
    tc.checkpoint_every_minutes = 1e9
    n_mels = config.data.n_mels

    class Trivial(keras.Model):
        """One mel-to-mel projection: a step of well under a millisecond."""

        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(n_mels)

        def call(self, batch, training=False):
            mel = self.dense(batch["mel"])
            frames, tokens = tf.shape(mel)[1], tf.shape(batch["tokens"])[1]
            return {"mel_before": mel, "mel_after": mel,
                    "stop_logits": tf.reduce_mean(mel, axis=-1),
                    "text_attention": tf.fill([tf.shape(mel)[0], frames, tokens],
                                              1.0 / tf.cast(tokens, tf.float32))}

    with tf.device(plan.model_device):
        model = Trivial()
        batch = {"tokens": tf.ones([2, 8], tf.int32), "token_lengths": tf.fill([2], 8),
                 "language_ids": tf.zeros([2], tf.int32),
                 "mel": tf.random.stateless_normal([2, 16, n_mels], [0, 1]),
                 "mel_lengths": tf.fill([2], 16)}
        model(batch)
    trainer = XTTSTrainer(config, model=model, model_device=plan.model_device)
    counters = [trainer.step.step, trainer.step.micro_step, trainer.step.nonfinite_consecutive,
                trainer.frames, trainer.step.stopped_at]

    class Feeder:
        """Staged batches; `sync` reads five step scalars before each one, as many reads as
        the loop made per step before (loss, updated, frames, streak, global step)."""

        def __init__(self, steps: int, sync: bool):
            self.left, self.sync = steps, sync

        def __iter__(self):
            return self

        def __next__(self):
            if self.left == 0:
                raise StopIteration
            if self.sync:
                for counter in counters:
                    counter.numpy()
            self.left -= 1
            return batch

        @property
        def exhausted(self):
            return self.left == 0

        def close(self):
            pass

    class Pipeline:
        val_steps = 0

        def __init__(self, steps: int, sync: bool):
            self.steps, self.sync = steps, sync

        def train_batches(self, epoch, device, skip_batches=0):
            return Feeder(self.steps, self.sync)

    def fit_seconds(steps: int, sync: bool) -> float:
        tc.max_steps = trainer.global_step + steps
        started = time.perf_counter()
        trainer.fit(Pipeline(steps, sync))
        return time.perf_counter() - started

    def bare_seconds(steps: int) -> float:
        return steps * _epoch_seconds_per_step(trainer, (batch for _ in range(steps)))

    n = args.steps
    variants = {"step alone": bare_seconds,
                "fit, reads every step": lambda k: fit_seconds(k, True),
                "fit, reads at log points": lambda k: fit_seconds(k, False)}
    for run in variants.values():
        run(n // 10)  # traces the step
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            times[name].append(run(n))
    us = {name: 1e6 * min(t) / n for name, t in times.items()}
    print(f"trivial model, {n} steps per run (fit's start and final checkpoint included), log "
          f"every {tc.log_every_steps} steps, best of {args.repeats}, round-robin:")
    for name in variants:
        print(f"  {name:<26} {us[name]:8.1f} us/step")
    bare = us["step alone"]
    every, at_log = us["fit, reads every step"] - bare, us["fit, reads at log points"] - bare
    print(f"loop overhead per step: reads every step {every:.1f} us, reads at log points "
          f"{at_log:.1f} us; ratio {every / max(at_log, 1e-9):.2f}x; whole step "
          f"{us['fit, reads every step'] / us['fit, reads at log points']:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "small.yaml"))
    parser.add_argument("--train-data", default=os.path.join(REPO, "samples", "ljspeech_sample"))
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per measurement")
    parser.add_argument("--feature-modes", default="raw,cached",
                        help="data.feature_mode values to measure, comma-separated")
    parser.add_argument("--noxla", action="store_true", help="training.xla: false")
    parser.add_argument("--xla-vs-plain", action="store_true",
                        help="also compare the XLA step with the plain tf.function step")
    parser.add_argument("--cpu-kernels", action="store_true",
                        help="only compare oneDNN's CPU kernels with TensorFlow's own")
    parser.add_argument("--loop-overhead", action="store_true",
                        help="only measure fit's per-step host overhead (trivial model)")
    parser.add_argument("--steps", type=int, default=2000, help="--loop-overhead steps per run")
    parser.add_argument("--repeats", type=int, default=None,
                        help="--loop-overhead repeats (default 5); --cpu-kernels rounds of one "
                             "process per kernel set (default 3)")
    parser.add_argument("--data-gpu", type=int, default=None)
    parser.add_argument("--model-gpu", type=int, default=None)
    args = parser.parse_args()
    if args.repeats is not None and args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more rounds")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    if args.cpu_kernels:
        args.repeats = args.repeats or 3
        cpu_kernels(args)
        return
    plan = devices.configure(devices.plan_devices(args.data_gpu, args.model_gpu))
    work = tempfile.mkdtemp(prefix="bench_step_")
    if args.loop_overhead:
        args.repeats = args.repeats or 5
        loop_overhead(args, plan, work)
        return
    config = XTTSConfig.from_yaml(args.config)
    if args.noxla:
        config.training.xla = False
    print(f"config {args.config}: batch size {config.data.batch_size}, XLA step "
          f"{config.training.xla}, precision {config.training.precision}")
    pipeline_vs_staged(config, args, plan, work)


if __name__ == "__main__":
    main()
