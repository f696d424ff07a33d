"""Log-mel throughput and parity: the pipeline's featurizer (myxtts.data.audio.LogMel, batched,
XLA-compiled as on a CPU data device: one launch per core, each looping over chunks of frames)
vs librosa.feature.melspectrogram on the same audio and parameters.

    python benchmarks/bench_mel.py [--config configs/base.yaml] [--repeats 5]

Audio: the bundled sample (real speech, samples/ljspeech_sample), resampled to the config's rate.
Speed: librosa (float32 audio, its default) and the featurizer (also laid out as on a GPU, one
XLA launch over the whole batch, to show what the CPU layout buys) run round-robin, best (and
median) of --repeats, so load from other jobs hits every variant alike, each after an idle pause
(--pause): librosa's OpenBLAS threads keep spinning for about 0.2 s after its mel projection
returns, and without the pause that spinning halved the speed of whatever ran next. Parity is
measured against librosa run in float64: the featurizer may differ from it by at most twice
what librosa's own float32 run differs, and never by more than
2e-3 (max |log10 mel difference|).
"""

import argparse
import glob
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data import audio  # noqa: E402
from myxtts.data import audio_io, audio_math  # noqa: E402
from tests.mel_reference import librosa_log_mel  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples",
                      "ljspeech_sample", "wavs")


def _max_diff(a, b) -> float:
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.5,
                        help="idle seconds after each timed run: librosa's OpenBLAS threads spin "
                             "for ~0.2 s after its last call and would slow whatever runs next")
    args = parser.parse_args()
    d = XTTSConfig.from_yaml(args.config).data
    clips = sorted((audio_io.decode(p, d.sample_rate).samples for p in glob.glob(SAMPLE + "/*")),
                   key=len)
    seconds = sum(len(c) for c in clips) / d.sample_rate
    cores = os.cpu_count()

    # As in training: batches of similar lengths (the pipeline buckets them), masked in a
    # tf.function around the featurizer's XLA launches.
    batches = []
    for i in range(0, len(clips), args.batch):
        group = clips[i:i + args.batch]
        padded = np.zeros([len(group), max(len(c) for c in group)], np.float32)
        for row, c in enumerate(group):
            padded[row, :len(c)] = c
        batches.append((tf.constant(padded), tf.constant([len(c) for c in group], tf.int32)))

    def featurizer(log_mel):
        masked = tf.function(log_mel.masked, reduce_retracing=True)

        def run():
            with tf.device("/CPU:0"):
                return [(masked(a, n)[0].numpy(), n.numpy()) for a, n in batches]
        return run

    cpu_log_mel = audio.LogMel.for_device(d, "CPU")
    cpu = (f"featurizer, CPU layout ({cpu_log_mel.xla_parts} launches x "
           f"{cpu_log_mel.chunk_frames}-frame chunks)")
    variants = {"librosa": lambda: [librosa_log_mel(c, d) for c in clips],
                cpu: featurizer(cpu_log_mel),
                "featurizer, GPU layout (1 launch)": featurizer(audio.LogMel.for_device(d, "GPU"))}
    outputs = {name: run() for name, run in variants.items()}  # warm-up, XLA compiles
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, run in variants.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
            time.sleep(args.pause)
    rates = {name: seconds / min(t) for name, t in times.items()}
    medians = {name: seconds / float(np.median(t)) for name, t in times.items()}

    reference = [librosa_log_mel(c, d, np.float64) for c in clips]
    tf_mels = [mel[row, :audio_math.num_frames(int(n), d.hop_length)]
               for mel, lengths in outputs[cpu]
               for row, n in enumerate(lengths)]
    librosa32 = _max_diff(outputs["librosa"], reference)
    featurizer_diff = _max_diff(tf_mels, reference)
    bound = min(2 * librosa32, 2e-3)

    print(f"config {args.config}: sr {d.sample_rate}, n_fft {d.n_fft}, hop {d.hop_length}, "
          f"win {d.win_length}, {d.n_mels} mels; {len(clips)} clips, {seconds:.1f} s of speech; "
          f"{cores} CPU cores; best of {args.repeats}, round-robin")
    for name, rate in rates.items():
        print(f"{name:<52} {rate:8.1f} s of audio per second (median run {medians[name]:.1f})")
    for name in list(variants)[1:]:
        print(f"speed-up {name} / librosa: {rates[name] / rates['librosa']:.2f}x (goal >= 3x; "
              f"median runs {medians[name] / medians['librosa']:.2f}x)")
    print(f"max |log10 mel difference| from librosa float64: librosa float32 {librosa32:.2e}, "
          f"featurizer {featurizer_diff:.2e} (goal <= min(2 x librosa float32, 2e-3) = "
          f"{bound:.2e}: {'met' if featurizer_diff <= bound else 'NOT met'})")


if __name__ == "__main__":
    main()
