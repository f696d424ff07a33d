"""How well long recordings are cut (myxtts.data.splitting) on real speech whose truth is known:
lines of a voice-acting corpus (samples/make_game_voice_corpus.py) of one speaker joined with
0.25-0.8 s of silence into "chapters", each line's text known. A piece that covers whole lines
must carry exactly their text; pieces cut inside a line are counted apart.

    python samples/make_game_voice_corpus.py --out corpora/fillets_nl --language nl --minutes 50
    python benchmarks/bench_long_recordings.py --data corpora/fillets_nl --language nl
    python benchmarks/bench_long_recordings.py --data corpora/fillets_nl --language nl --rate-only

Prints one line per chapter and the totals.
"""

import argparse
import os
import sys
import time

import librosa
import numpy as np
import soundfile as sf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from myxtts.data.splitting import split_utterance, voiced_intervals  # noqa: E402
from myxtts.data.text import multilingual_cleaner  # noqa: E402
from myxtts.data.transcript_alignment import hear_punctuation  # noqa: E402

RATE = 16000


def chapter(rows, data, language, seed):
    """(samples, line texts, [start, end) of each line in samples)."""
    rng = np.random.default_rng(seed)
    parts, texts, spans, at = [], [], [], 0
    for row in rows:
        samples, rate = sf.read(os.path.join(data, "wavs", f"{row[0]}.ogg"), dtype="float32")
        samples = samples.mean(1) if samples.ndim > 1 else samples
        samples, _ = librosa.effects.trim(librosa.resample(samples, orig_sr=rate, target_sr=RATE),
                                          top_db=40)
        if parts:
            gap = np.zeros(int(rng.uniform(0.25, 0.8) * RATE), np.float32)
            parts.append(gap)
            at += len(gap)
        spans.append((at, at + len(samples)))
        parts.append(samples)
        at += len(samples)
        texts.append(multilingual_cleaner(row[1], language))
    return np.concatenate(parts), texts, spans


def judge(pieces, texts, spans):
    right = wrong = inside = 0
    for p in pieces:
        start, end = p.offset, p.offset + p.length
        covered = [i for i, (a, b) in enumerate(spans) if a < end and b > start]
        whole = [i for i, (a, b) in enumerate(spans) if a >= start and b <= end]
        if covered != whole:
            inside += 1
        elif p.text == " ".join(texts[i] for i in whole):
            right += 1
        else:
            wrong += 1
    return right, wrong, inside


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--language", required=True)
    parser.add_argument("--lines", type=int, default=40, help="lines per chapter")
    parser.add_argument("--chapters", type=int, default=2, help="chapters per speaker")
    parser.add_argument("--rate-only", action="store_true", help="no aligner: the rate alone")
    args = parser.parse_args()
    with open(os.path.join(args.data, "metadata.csv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("|") for line in f]
    totals = np.zeros(5)
    for speaker in sorted({r[3] for r in rows}):
        own = [r for r in rows if r[3] == speaker]
        for k in range(args.chapters):
            lines = own[k * args.lines:(k + 1) * args.lines]
            if len(lines) < args.lines:
                break
            samples, texts, spans = chapter(lines, args.data, args.language, k)
            text = " ".join(texts)
            started = time.monotonic()
            heard = None if args.rate_only else hear_punctuation(text, samples, RATE,
                                                                  args.language)
            pieces, reason = split_utterance(text, voiced_intervals(samples, RATE, 40.0),
                                             len(samples), RATE, 0.5, 8.0, heard)
            seconds = time.monotonic() - started
            right, wrong, inside = judge(pieces, texts, spans)
            kept = sum(p.length for p in pieces) / RATE
            totals += [right, wrong, inside, kept, len(samples) / RATE]
            print(f"{speaker} chapter {k + 1}: {len(samples) / RATE:.0f} s, {len(pieces)} pieces, "
                  f"right {right}, wrong {wrong}, inside a line {inside}, kept {kept:.0f} s "
                  f"({seconds:.1f} s){'; ' + reason if reason else ''}")
    right, wrong, inside, kept, total = totals
    print(f"total: {int(right)} right, {int(wrong)} wrong, {int(inside)} cut inside a line; "
          f"{kept:.0f} of {total:.0f} s kept ({kept / total:.0%})")


if __name__ == "__main__":
    main()
