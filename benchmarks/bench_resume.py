"""Resuming mid-epoch in raw mode: time to the first batch at the start of an epoch vs at its
last batch.

    python benchmarks/bench_resume.py [--config configs/tiny.yaml]
                                      [--data samples/ljspeech_sample] [--repeats 3]

Builds the raw-mode InputPipeline and times `train_dataset(epoch, skip_batches=k)` from its
creation to its first batch on the data device, for k = 0 (start of the epoch) and k = the last
batch (what a restart late in an epoch asks for), round-robin, best of --repeats. When skipping
costs nothing the two times are about equal; when the skipped utterances are decoded again, the
second grows with the epoch.
"""

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import tensorflow as tf  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=os.path.join(REPO, "configs", "tiny.yaml"))
    parser.add_argument("--data", default=os.path.join(REPO, "samples", "ljspeech_sample"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = XTTSConfig.from_yaml(args.config)
    config.data.feature_mode = "raw"
    with tempfile.TemporaryDirectory() as work:
        pipeline = InputPipeline(config, args.data, work_dir=work)
        last = pipeline.train_steps_per_epoch - 1

        def first_batch(skip):
            started = time.perf_counter()
            next(iter(pipeline.train_dataset(1, skip_batches=skip)))
            return time.perf_counter() - started

        first_batch(0)  # warm-up: tracing, file system cache
        times = {0: [], last: []}
        for _ in range(args.repeats):
            for skip in times:
                times[skip].append(first_batch(skip))
    start, end = min(times[0]), min(times[last])
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores; {args.data}: "
          f"{pipeline.train_steps_per_epoch} batches per epoch (raw mode), best of "
          f"{args.repeats}")
    print(f"first batch at the epoch's start {start:.3f} s | resuming at batch {last} "
          f"{end:.3f} s ({end / start:.2f}x)")


if __name__ == "__main__":
    main()
