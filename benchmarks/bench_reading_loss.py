"""The reading probe's CTC loss (model.reading_probe, myxtts.training.losses.reading_loss): the
CTC kernel with sparse labels (used without XLA) against the CTC of plain ops (used under
training.xla, which the kernel does not compile under), forward and backward through the probe,
on the shapes of configs/real_quick.yaml's longest bucket (16 items, 492 frames, 176 tokens).

    python benchmarks/bench_reading_loss.py [--batch 16] [--frames 492] [--tokens 176]

Prints each path's seconds per step and the ratio; both give the same loss
(tests/test_trainer_step.py).
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402

from myxtts.models.reading_probe import PROBE_CHANNELS, ReadingProbe  # noqa: E402
from myxtts.training.losses import reading_loss  # noqa: E402

VOCAB = 60
N_MELS = 80


def seconds_per_step(dense: bool, mel, tokens, token_lengths, mel_lengths, probe,
                     repeats: int) -> float:
    @tf.function
    def step(mel):
        with tf.GradientTape() as tape:
            tape.watch(mel)
            loss = (reading_loss(probe(mel), tokens, token_lengths, mel_lengths, dense)
                    + reading_loss(probe(mel, frozen=True), tokens, token_lengths, mel_lengths,
                                   dense))
        return loss, tape.gradient(loss, [mel, *probe.trainable_variables])

    step(mel)  # trace
    started = time.perf_counter()
    for _ in range(repeats):
        loss, _ = step(mel)
    float(loss)
    return (time.perf_counter() - started) / repeats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=492)
    parser.add_argument("--tokens", type=int, default=176)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    tf.random.set_seed(0)
    probe = ReadingProbe(VOCAB, N_MELS, PROBE_CHANNELS)
    mel = tf.random.normal([args.batch, args.frames, N_MELS])
    tokens = tf.random.uniform([args.batch, args.tokens], 1, VOCAB, tf.int32)
    token_lengths = tf.random.uniform([args.batch], args.tokens // 2, args.tokens + 1, tf.int32)
    mel_lengths = tf.fill([args.batch], args.frames)
    kernel = seconds_per_step(False, mel, tokens, token_lengths, mel_lengths, probe, args.repeats)
    plain = seconds_per_step(True, mel, tokens, token_lengths, mel_lengths, probe, args.repeats)
    print(f"reading loss, {args.batch} x {args.frames} frames, up to {args.tokens} tokens, "
          f"probe on the recording and on the output, forward + backward:")
    print(f"  CTC kernel (sparse labels, no XLA): {kernel:.3f} s a step")
    print(f"  CTC of plain ops (XLA's path, run here without XLA): {plain:.3f} s a step")
    print(f"  ratio plain / kernel: {plain / kernel:.1f}x")


if __name__ == "__main__":
    main()
