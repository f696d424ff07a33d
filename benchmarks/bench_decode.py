"""Autoregressive decode speed: KV-cache vs full recompute, the cost of a high step cap, and
the real-time factor.

    python benchmarks/bench_decode.py [--presets tiny,small] [--frames 400] [--cap 1000]
                                      [--repeats 3]

For each preset: an untrained XTTSModel (speed does not depend on the weights) decodes one
utterance of exactly --frames mel frames (the stop head is switched off and the per-token limit
ends the decode at exactly --frames, so every run does the same work) with
  * the KV cache in a tf.function (graph), max_steps = frames / r,
  * the KV cache XLA-compiled (jit_compile=True), max_steps = frames / r,
  * both again with max_steps = --cap (the same frames; the cap only sizes the buffers),
  * full recompute (the whole decoder re-run over all previous steps at every step),
round-robin (so load from other jobs hits every variant alike), and prints the best-of-repeats
times, the speed-up of the cache (goal for `small`: graph >= 8x), the cost of the cap (time with
max_steps = --cap / time with max_steps = frames / r; goal <= 1.2x), the largest difference
between the cached and the fully recomputed mel (goal <= 1e-4) and the real-time factor (decode
seconds per second of audio at the preset's sample rate and hop). All numbers come from this
one run.
"""

import argparse
import os
import sys
import time

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.models.xtts import XTTSModel  # noqa: E402

VOCAB = 100


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    out["mel"].numpy()
    return time.perf_counter() - start, out


def bench(preset: str, frames: int, cap: int, repeats: int):
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", f"{preset}.yaml"))
    m, d = config.model, config.data
    tf.random.set_seed(0)
    model = XTTSModel(m, VOCAB, len(d.languages), d.n_mels)
    # Stop head off: every decode runs to max_steps, so all variants do the same work.
    model.decoder.stop_projection.kernel.assign(tf.zeros_like(model.decoder.stop_projection.kernel))
    model.decoder.stop_projection.bias.assign(tf.fill([m.reduction_factor], -1e4))
    steps = frames // m.reduction_factor
    # The per-token limit ends every decode at exactly `frames`, whatever max_steps is.
    num_tokens = 10
    model.max_frames_per_token = frames / num_tokens
    rng = np.random.default_rng(0)
    tokens = tf.constant(rng.integers(1, VOCAB, (1, num_tokens)), tf.int32)
    lengths = tf.constant([num_tokens], tf.int32)
    language = tf.zeros([1], tf.int32)
    ref = tf.constant(rng.normal(-2, 1, (1, int(3 * d.sample_rate / d.hop_length), d.n_mels)),
                      tf.float32)
    latents = model.speaker_latents(ref, tf.shape(ref)[1:2])

    def run(max_steps=steps, **kwargs):
        return lambda: model.generate(tokens, lengths, language, latents, max_steps=max_steps,
                                      **kwargs)

    variants = {"cached": run(), "cached_cap": run(cap), "xla": run(jit_compile=True),
                "xla_cap": run(cap, jit_compile=True), "full": run(use_cache=False)}
    times = {name: [] for name in variants}
    mels = {}
    for name, fn in variants.items():  # warm-up: tracing / XLA compilation
        _, out = _timed(fn)
        assert int(out["mel_lengths"][0]) == frames, (name, out["mel_lengths"])
        mels[name] = out["mel"][0, :frames].numpy()
    differences = {name: float(np.abs(mels[name] - mels["full"]).max())
                   for name in ("cached", "cached_cap", "xla", "xla_cap")}
    # Round-robin, best of --repeats: on a shared machine every variant sees the same load.
    for _ in range(repeats):
        for name, fn in variants.items():
            times[name].append(_timed(fn)[0])
    times = {name: min(t) for name, t in times.items()}
    cached, xla, full = times["cached"], times["xla"], times["full"]
    audio_seconds = frames * d.hop_length / d.sample_rate
    print(f"{preset:>5}: {model.count_params():>11,} params | {frames} frames = "
          f"{audio_seconds:.2f} s audio ({d.sample_rate} Hz, hop {d.hop_length})\n"
          f"       full recompute {full:7.3f} s | KV cache {cached:6.3f} s "
          f"({full / cached:5.1f}x) | KV cache + XLA {xla:6.3f} s ({full / xla:5.1f}x)  "
          f"(goal for small: graph >= 8x)\n"
          f"       real-time factor: KV cache {cached / audio_seconds:.3f}, "
          f"KV cache + XLA {xla / audio_seconds:.3f}, full recompute "
          f"{full / audio_seconds:.3f}  (< 1 = faster than real time)\n"
          f"       max_steps {cap} instead of {steps} for the same {frames} frames: graph "
          f"{times['cached_cap']:6.3f} s ({times['cached_cap'] / cached:.2f}x), XLA "
          f"{times['xla_cap']:6.3f} s ({times['xla_cap'] / xla:.2f}x)  (goal <= 1.2x)\n"
          f"       max |mel difference| from full recompute: KV cache "
          f"{max(differences['cached'], differences['cached_cap']):.1e}, KV cache + XLA "
          f"{max(differences['xla'], differences['xla_cap']):.1e}  (goal <= 1e-4)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--cap", type=int, default=1000,
                        help="max_steps of the high-cap runs (model.max_decoder_steps default)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores, devices: "
          f"{[d.name for d in tf.config.list_logical_devices()]}")
    for preset in args.presets.split(","):
        bench(preset.strip(), args.frames, args.cap, args.repeats)


if __name__ == "__main__":
    main()
