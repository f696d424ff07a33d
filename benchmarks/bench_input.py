"""The input pipeline alone, on a large corpus: utterances/s, mel frames/s and audio seconds/s
delivered as featurized batches on the model device, raw and cached, local and from tf.data
service workers on localhost, fixed batch sizes and a frame budget; next to what the `small`
model's training step consumes on this CPU.

    python benchmarks/bench_input.py --corpus corpora/scale1m [--batches 300]
        [--budget FRAMES] [--service-workers 1,2]

configs/tiny.yaml features (16 kHz, hop 256, 40 mels) on two logical CPU devices (data /CPU:0,
model /CPU:1). Each variant builds its InputPipeline (validation is cached after the first),
skips --warmup batches, then times --batches. Cached mode uses (or first builds) the corpus'
feature cache. The frame budgets are multiples (--budgets) of the fixed rule's largest batch
(data.batch_size x the longest bucket's frames): at 1x both hold the same padded frames at most
(the fixed rule already gives shorter buckets proportionally more utterances). Padding = padded
frames / all frames of the batches, fill-ins included. The `small` step is timed on the bundled sample's batches
(its own audio settings), compiled per bucket first; audio seconds/s compares the two.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts import devices  # noqa: E402

plan = devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))

import numpy as np  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402

SAMPLE = os.path.join(REPO, "samples", "ljspeech_sample")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(pipeline, warmup: int, batches: int) -> dict:
    d = pipeline.data_config
    utterances = frames = padded = 0
    with pipeline.train_batches(0, plan.model_device) as feeder:
        iterator = iter(feeder)
        for _ in range(warmup):
            next(iterator)
        start = time.perf_counter()
        for _ in range(batches):
            batch = next(iterator)
            lengths = batch["mel_lengths"].numpy()
            utterances += len(lengths)
            frames += int(lengths.sum())
            padded += int(np.prod(batch["mel"].shape[:2]))
        seconds = time.perf_counter() - start
    return {"utt/s": utterances / seconds, "frames/s": frames / seconds,
            "audio s/s": frames * d.hop_length / d.sample_rate / seconds,
            "padding": 1 - frames / padded}


def tiny(mode: str, **data) -> XTTSConfig:
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
    config.override({"data.feature_mode": mode, "data.val_fraction": 0.002,
                     **{f"data.{k}": v for k, v in data.items()}}, source="bench")
    return config


def small_step_rate(steps: int) -> dict:
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "small.yaml"))
    config.override({"data.feature_mode": "raw", "data.val_fraction": 0.0}, source="bench")
    d = config.data
    with tempfile.TemporaryDirectory() as work:
        pipeline = InputPipeline(config, SAMPLE, data_device=plan.data_device, work_dir=work)
        trainer = XTTSTrainer(config, model_device=plan.model_device,
                              tokenizer=pipeline.tokenizer)
        with pipeline.train_batches(0, plan.model_device) as feeder:
            batches = list(feeder)
        for batch in batches:  # compile every bucket shape
            trainer.step(batch)["total"].numpy()
        utterances = frames = 0
        start = time.perf_counter()
        for i in range(steps):
            batch = batches[i % len(batches)]
            trainer.step(batch)["total"].numpy()
            utterances += batch["mel"].shape[0]
            frames += int(batch["mel_lengths"].numpy().sum())
        seconds = time.perf_counter() - start
    return {"utt/s": utterances / seconds, "frames/s": frames / seconds,
            "audio s/s": frames * d.hop_length / d.sample_rate / seconds,
            "step s": seconds / steps}


class Service:
    """A dispatcher and `workers` workers on 127.0.0.1, as subprocesses."""

    def __init__(self, workers: int):
        self.port = free_port()
        command = [sys.executable, "-m", "myxtts.data_service"]
        self.procs = [subprocess.Popen(command + ["dispatcher", "--port", str(self.port)],
                                       cwd=REPO, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)]
        time.sleep(3)
        for _ in range(workers):
            self.procs.append(subprocess.Popen(
                command + ["worker", "--dispatcher", f"127.0.0.1:{self.port}", "--port",
                           str(free_port())], cwd=REPO, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL))
        time.sleep(3)

    def close(self):
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--budgets", default="1,2",
                        help="frame budgets as multiples of the fixed rule's largest batch")
    parser.add_argument("--service-workers", default="1,2")
    parser.add_argument("--small-steps", type=int, default=20)
    args = parser.parse_args()
    results = {}

    def run(name, config):
        started = time.perf_counter()
        pipeline = InputPipeline(config, args.corpus, data_device=plan.data_device)
        ready = time.perf_counter() - started
        results[name] = dict(measure(pipeline, args.warmup, args.batches), ready=ready,
                             buckets=[(b.frames, b.batch_size) for b in pipeline.buckets])
        print(name, results[name], flush=True)
        return pipeline

    run("raw", tiny("raw"))
    fixed = run("cached", tiny("cached"))
    largest = max(b.frames * b.batch_size for b in fixed.buckets)
    del fixed
    for multiple in [float(m) for m in args.budgets.split(",") if m]:
        budget = int(largest * multiple)
        run(f"cached, {budget}-frame budget", tiny("cached", max_frames_per_batch=budget))
    for workers in [int(w) for w in args.service_workers.split(",") if w]:
        service = Service(workers)
        try:
            run(f"cached, service x{workers}",
                tiny("cached", data_service=f"127.0.0.1:{service.port}"))
        finally:
            service.close()
    small = small_step_rate(args.small_steps)

    print(f"\n{args.corpus}: {os.cpu_count()} CPU cores; {args.batches} batches after "
          f"{args.warmup}; configs/tiny.yaml features")
    print(f"{'variant':<30}{'utt/s':>9}{'frames/s':>11}{'audio s/s':>11}{'padding':>9}"
          f"{'ready s':>9}  buckets (frames/batch size)")
    for name, r in results.items():
        print(f"{name:<30}{r['utt/s']:>9.0f}{r['frames/s']:>11.0f}{r['audio s/s']:>11.1f}"
              f"{r['padding']:>9.1%}{r['ready']:>9.1f}  "
              + " ".join(f"{f}/{b}" for f, b in r["buckets"]))
    print(f"{'small model step (consumes)':<30}{small['utt/s']:>9.1f}{small['frames/s']:>11.0f}"
          f"{small['audio s/s']:>11.1f}{'':>9}{'':>9}  {small['step s']:.2f} s per step")


if __name__ == "__main__":
    main()
