"""Autoregressive decode speed: KV-cache vs full recompute, and the real-time factor.

    python benchmarks/bench_decode.py [--presets tiny,small] [--frames 400] [--repeats 5]

For each preset: an untrained XTTSModel (speed does not depend on the weights) decodes one
utterance of exactly --frames mel frames (the stop head is switched off so every run has the
same length) with
  * the KV cache in a tf.function (graph),
  * the KV cache XLA-compiled (jit_compile=True),
  * full recompute (the whole decoder re-run over all previous steps at every step),
and prints the times, the speed-up of the cache and the real-time factor (decode seconds per
second of audio at the preset's sample rate and hop). All numbers come from this one run.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.models.xtts import XTTSModel  # noqa: E402

VOCAB = 100


def _timed(fn, repeats):
    fn()  # warm-up: tracing / XLA compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        out["mel"].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def bench(preset: str, frames: int, repeats: int):
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", f"{preset}.yaml"))
    m, d = config.model, config.data
    tf.random.set_seed(0)
    model = XTTSModel(m, VOCAB, len(d.languages), d.n_mels)
    # Stop head off: every decode runs to max_steps, so all variants do the same work.
    model.decoder.stop_projection.kernel.assign(tf.zeros_like(model.decoder.stop_projection.kernel))
    model.decoder.stop_projection.bias.assign(tf.fill([m.reduction_factor], -1e4))
    steps = frames // m.reduction_factor
    num_tokens = int(np.ceil(steps * m.reduction_factor / m.max_frames_per_token)) + 1
    rng = np.random.default_rng(0)
    tokens = tf.constant(rng.integers(1, VOCAB, (1, num_tokens)), tf.int32)
    lengths = tf.constant([num_tokens], tf.int32)
    language = tf.zeros([1], tf.int32)
    ref = tf.constant(rng.normal(-2, 1, (1, int(3 * d.sample_rate / d.hop_length), d.n_mels)),
                      tf.float32)
    latents = model.speaker_latents(ref, tf.shape(ref)[1:2])

    def run(**kwargs):
        return lambda: model.generate(tokens, lengths, language, latents, max_steps=steps,
                                      **kwargs)

    cached, out = _timed(run(), repeats)
    assert int(out["mel_lengths"][0]) == frames, out["mel_lengths"]
    xla, _ = _timed(run(jit_compile=True), repeats)
    full, _ = _timed(run(use_cache=False), 1)
    audio_seconds = frames * d.hop_length / d.sample_rate
    print(f"{preset:>5}: {model.count_params():>11,} params | {frames} frames = "
          f"{audio_seconds:.2f} s audio ({d.sample_rate} Hz, hop {d.hop_length})\n"
          f"       full recompute {full:7.3f} s | KV cache {cached:6.3f} s "
          f"({full / cached:5.1f}x) | KV cache + XLA {xla:6.3f} s ({full / xla:5.1f}x)\n"
          f"       real-time factor: KV cache {cached / audio_seconds:.3f}, "
          f"KV cache + XLA {xla / audio_seconds:.3f}, full recompute "
          f"{full / audio_seconds:.3f}  (< 1 = faster than real time)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores, devices: "
          f"{[d.name for d in tf.config.list_logical_devices()]}")
    for preset in args.presets.split(","):
        bench(preset.strip(), args.frames, args.repeats)


if __name__ == "__main__":
    main()
