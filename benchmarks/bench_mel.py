"""Log-mel throughput: tf.signal (myxtts.data.audio.LogMel, batched, XLA-compiled as in the
pipeline) vs librosa.feature.melspectrogram on the same audio, plus the parity (max |Δ log10
mel|).

    python benchmarks/bench_mel.py [--config configs/base.yaml] [--repeats 5]

Audio: the bundled sample (real speech, samples/ljspeech_sample), resampled to the config's rate.
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

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples",
                      "ljspeech_sample", "wavs")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/base.yaml")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    d = XTTSConfig.from_yaml(args.config).data
    clips = sorted((audio.decode(p, d.sample_rate).samples for p in glob.glob(SAMPLE + "/*")),
                   key=len)
    seconds = sum(len(c) for c in clips) / d.sample_rate

    start = time.perf_counter()
    for _ in range(args.repeats):
        reference = [audio.librosa_log_mel(c, d) for c in clips]
    librosa_rate = args.repeats * seconds / (time.perf_counter() - start)

    log_mel = audio.LogMel.from_config(d)
    # As in training: batches of similar lengths (the pipeline buckets them) through an
    # XLA-compiled function (the pipeline's featurizer is jit-compiled).
    compiled = tf.function(log_mel.masked, jit_compile=True)
    batches = []
    for i in range(0, len(clips), args.batch):
        group = clips[i:i + args.batch]
        padded = np.zeros([len(group), max(len(c) for c in group)], np.float32)
        for row, c in enumerate(group):
            padded[row, :len(c)] = c
        batches.append((tf.constant(padded), tf.constant([len(c) for c in group], tf.int32)))
    with tf.device("/CPU:0"):
        outputs = [compiled(a, n) for a, n in batches]  # compile once per shape
        start = time.perf_counter()
        for _ in range(args.repeats):
            outputs = [compiled(a, n)[0].numpy() for a, n in batches]
        tf_rate = args.repeats * seconds / (time.perf_counter() - start)

    parity = 0.0
    for b, (_, lengths) in enumerate(batches):
        for row, n in enumerate(lengths.numpy()):
            ref = reference[b * args.batch + row]
            frames = audio.num_frames(int(n), d.hop_length)
            parity = max(parity, float(np.abs(outputs[b][row, :frames] - ref).max()))

    print(f"config {args.config}: sr {d.sample_rate}, n_fft {d.n_fft}, hop {d.hop_length}, "
          f"win {d.win_length}, {d.n_mels} mels; {len(clips)} clips, {seconds:.1f} s of speech")
    print(f"librosa:   {librosa_rate:8.1f} s of audio per second")
    print(f"tf.signal: {tf_rate:8.1f} s of audio per second (length-sorted batches of "
          f"{args.batch}, XLA, CPU)")
    print(f"speed-up tf.signal / librosa: {tf_rate / librosa_rate:.2f}x (goal >= 3x)")
    print(f"parity: max |log10 mel difference| = {parity:.2e} (goal <= 1e-3)")


if __name__ == "__main__":
    main()
