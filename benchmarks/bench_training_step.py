"""Training-step benchmark, both comparisons from one run:

  1. the step fed by the real input pipeline (data device → feeder → model device) vs the same
     step on batches already staged on the model device (goal: <= 1.05x for configs/tiny.yaml);
  2. the XLA-compiled step vs the plain tf.function step.

    python benchmarks/bench_training_step.py [--config configs/tiny.yaml]
        [--train-data samples/ljspeech_sample] [--epochs 3] [--feature-mode raw|cached]
        [--data-gpu 0 --model-gpu 1]

Every bucket shape is compiled before timing; times are wall-clock per optimizer step, including
the host read of the step's scalars that the trainer does each step.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts import devices  # noqa: E402  (no TensorFlow yet)
from myxtts.config import XTTSConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "tiny.yaml"))
    parser.add_argument("--train-data", default=os.path.join(REPO, "samples", "ljspeech_sample"))
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per measurement")
    parser.add_argument("--feature-mode", choices=["raw", "cached"], default=None,
                        help="override data.feature_mode (cached: mels read from TFRecords)")
    parser.add_argument("--data-gpu", type=int, default=None)
    parser.add_argument("--model-gpu", type=int, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")

    plan = devices.configure(devices.plan_devices(args.data_gpu, args.model_gpu))
    from myxtts.data.pipeline import InputPipeline  # pylint: disable=import-outside-toplevel
    from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel

    config = XTTSConfig.from_yaml(args.config)
    if args.feature_mode:
        config.data.feature_mode = args.feature_mode
    work = tempfile.mkdtemp(prefix="bench_step_")
    pipeline = InputPipeline(config, args.train_data, data_device=plan.data_device,
                             work_dir=work)

    def trainer(xla: bool) -> XTTSTrainer:
        config.training.xla = xla
        config.training.checkpoint_dir = os.path.join(work, "xla" if xla else "noxla")
        return XTTSTrainer(config, model_device=plan.model_device,
                           tokenizer=pipeline.tokenizer)

    def staged_steps(t: XTTSTrainer, batches, epochs: int) -> list:
        times = []
        for _ in range(epochs):
            for batch in batches:
                started = time.perf_counter()
                t._run_step(batch)  # pylint: disable=protected-access
                times.append(time.perf_counter() - started)
        return times

    xla = trainer(True)
    with pipeline.train_batches(0, plan.model_device) as feeder:
        staged = list(feeder)  # featurized, on the model device: the "already staged" input
    print(f"feature mode {config.data.feature_mode}; {len(staged)} batches per epoch; staged on {staged[0]['mel'].device}; "
          f"model variables on {xla.model.variables[0].value.device}")
    compile_started = time.perf_counter()
    staged_steps(xla, staged, 1)  # compiles every bucket shape
    print(f"XLA compile of {len({b['mel'].shape[1] for b in staged})} bucket shapes + first "
          f"epoch: {time.perf_counter() - compile_started:.1f} s")

    # 1. real pipeline vs staged batches, alternating epochs so both see the same machine load.
    piped, on_device, wait = [], [], 0.0
    for epoch in range(1, args.epochs + 1):
        with pipeline.train_batches(epoch, plan.model_device) as feeder:
            feeder.wait_until_filled(5.0)  # as --model-start-delay would
            started = time.perf_counter()
            count = 0
            for batch in feeder:
                xla._run_step(batch)  # pylint: disable=protected-access
                count += 1
            piped.append((time.perf_counter() - started) / count)
            wait += feeder.wait_seconds
        on_device.append(statistics.mean(staged_steps(xla, staged, 1)))
    piped_ms, staged_ms = 1e3 * statistics.mean(piped), 1e3 * statistics.mean(on_device)
    print(f"step with the real pipeline:        {piped_ms:7.2f} ms/step "
          f"(waited for data {wait:.2f} s in total)")
    print(f"step on batches staged on {plan.model_device}: {staged_ms:7.2f} ms/step")
    print(f"pipeline / staged ratio: {piped_ms / staged_ms:.3f}x (goal <= 1.05x)")

    # 2. XLA vs the plain tf.function step, both on staged batches.
    plain = trainer(False)
    staged_steps(plain, staged, 1)  # traces every bucket shape
    plain_times, xla_times = [], []
    for _ in range(args.epochs):
        plain_times += staged_steps(plain, staged, 1)
        xla_times += staged_steps(xla, staged, 1)
    plain_ms, xla_ms = 1e3 * statistics.mean(plain_times), 1e3 * statistics.mean(xla_times)
    print(f"XLA step: {xla_ms:7.2f} ms/step; non-XLA step: {plain_ms:7.2f} ms/step; "
          f"non-XLA / XLA ratio: {plain_ms / xla_ms:.2f}x")


if __name__ == "__main__":
    main()
