"""Padding waste: padded frames / total frames when every utterance is padded to one fixed max
length vs to its length bucket (myxtts.data.buckets, the boundaries the pipeline derives).

    python benchmarks/bench_bucketing.py

Length distributions (mel frames at 22.05 kHz, hop 256 = 86.1 frames/s):
  ljspeech-like  13,100 utterances, 1.1-10.1 s, mean 6.6 s, skewed to long (a Beta(3, 1.93)
                 model of LJSpeech's published duration range and mean; no download needed)
  sample         the bundled samples/ljspeech_sample (actual lengths, 16 kHz, hop 256)
"""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402

from myxtts.config import DataConfig  # noqa: E402
from myxtts.data.buckets import make_buckets, padding_fraction  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "samples",
                      "ljspeech_sample", "wavs")


def distributions():
    rng = np.random.default_rng(0)
    seconds = 1.1 + 9.0 * rng.beta(3.0, 1.93, 13100)
    yield "ljspeech-like", (1 + seconds * 22050 // 256).astype(int)
    frames = [1 + sf.info(p).frames // 256 for p in sorted(glob.glob(SAMPLE + "/*"))]
    yield "sample", np.asarray(frames)


def main():
    default = DataConfig().num_buckets
    print(f"{'distribution':<15}{'utterances':>11}{'fixed max':>11}" +
          "".join(f"{f'{k} buckets':>12}" for k in (3, 5, default)))
    for name, frames in distributions():
        fixed = padding_fraction(frames, [frames.max()])
        cells = []
        for k in (3, 5, default):
            buckets = make_buckets(frames, np.ones_like(frames), k, [], 32, 2)
            cells.append(padding_fraction(frames, [b.frames for b in buckets]))
        print(f"{name:<15}{len(frames):>11}{fixed:>11.1%}" +
              "".join(f"{c:>12.1%}" for c in cells))
    print(f"padded frames / total frames; data.num_buckets default = {default} "
          f"(goal <= 10% with bucketing)")


if __name__ == "__main__":
    main()
