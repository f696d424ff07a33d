"""Pipeline throughput (batches/s) in raw and cached modes vs the tiny-config model step.

    python benchmarks/bench_pipeline.py [--epochs 2]

Runs on two logical CPU devices (data /CPU:0, model /CPU:1) with configs/tiny.yaml and the
bundled sample. Each figure is measured on its own (the pipeline through a DeviceFeeder with no
model step; the XTTSTrainer step on pre-fetched batches, XLA compiled once per bucket first),
then both together, reporting the share of step time spent waiting for data. On a GPU machine
the two roles run on different devices; here both share 2 CPU cores.
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts import devices  # noqa: E402

plan = devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402

SAMPLE = os.path.join(REPO, "samples", "ljspeech_sample")


def pipeline_rate(pipeline, epochs):
    """Batches/s through the feeder (featurized, on the model device), epochs after the first."""
    rates = []
    for epoch in range(epochs + 1):
        start = time.perf_counter()
        with pipeline.train_batches(epoch, plan.model_device) as feeder:
            count = sum(1 for _ in feeder)
        if epoch:
            rates.append(count / (time.perf_counter() - start))
    return sum(rates) / len(rates)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    work = tempfile.mkdtemp()
    rates = {}
    pipelines = {}
    for mode in ("raw", "cached"):
        config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
        config.override({"data.feature_mode": mode, "training.checkpoint_dir": work})
        pipelines[mode] = InputPipeline(config, SAMPLE, data_device=plan.data_device,
                                        work_dir=work)
        rates[mode] = pipeline_rate(pipelines[mode], args.epochs)

    trainer = XTTSTrainer(config, model_device=plan.model_device,
                          tokenizer=pipelines["raw"].tokenizer)
    with pipelines["cached"].train_batches(0, plan.model_device) as feeder:
        batches = list(feeder)
    for batch in batches:  # compile every bucket shape
        trainer.step(batch)
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in batches:
            trainer.step(batch)["total"].numpy()
    step_rate = args.epochs * len(batches) / (time.perf_counter() - start)

    waiting = {}
    for mode, pipeline in pipelines.items():
        with pipeline.train_batches(args.epochs + 1, plan.model_device) as feeder:
            begin = time.perf_counter()  # no start delay: the first batches are waited for
            for batch in feeder:
                trainer.step(batch)["total"].numpy()
            waiting[mode] = feeder.wait_seconds / (time.perf_counter() - begin)

    print(f"tiny config, bundled sample: {pipelines['raw'].train_steps_per_epoch} batches per "
          f"epoch, buckets {[(b.frames, b.batch_size) for b in pipelines['raw'].buckets]}")
    print(f"model step (XTTSTrainer, tiny, XLA={config.training.xla}): {step_rate:7.2f} steps/s")
    for mode in ("raw", "cached"):
        print(f"pipeline {mode:<6}: {rates[mode]:7.2f} batches/s = {rates[mode] / step_rate:5.2f}x "
              f"what the step consumes; training with it: {waiting[mode]:.1%} of step time "
              f"waiting for data")


if __name__ == "__main__":
    main()
