r"""Writes a large synthetic corpus for scale tests: N utterances of M speakers, fast.

    python benchmarks/make_scale_corpus.py --out corpora/scale1m --utterances 1000000 \
        --speakers 3000
    python benchmarks/make_scale_corpus.py --out corpora/scale100k --utterances 100000 \
        --speakers 300

Each speaker is a voiced signal of its own (a harmonic series on a gliding pitch around the
speaker's f0, shaped by the speaker's formants); each utterance is a piece of it 0.5-10 s long
(0.5 s + an exponential tail, mean --mean-seconds, 1.0 by default: 32 GB per million), cut into
syllables by an amplitude envelope, with a short silence at both ends. The text is pseudo-words, about 2.5 per
second of audio. 16 kHz mono 16-bit WAV in `wavs/`, rows `id|text|text|speaker` in
`metadata.csv`. Not speech: it measures the input pipeline, not what a model learns.

The same arguments write the same corpus (seeded per utterance). Two processes write it; an
interrupted run is resumed by running the same command again (files already written are kept,
metadata.csv is written last).
"""

import argparse
import multiprocessing
import os
import sys
import time

import numpy as np
import soundfile as sf

RATE = 16000
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "po", "ga", "fu", "ri", "ba",
             "se", "no", "ta", "li", "me", "ho"]
CHUNK = 2000


def speaker_voice(speaker: int, seconds: float = 12.0) -> np.ndarray:
    """A speaker's voiced signal: harmonics of a gliding f0 through the speaker's formants."""
    rng = np.random.default_rng([7, speaker])
    f0 = rng.uniform(85, 260)
    formants = np.sort(rng.uniform([300, 900, 2000], [900, 2200, 3400]))
    t = np.arange(int(seconds * RATE)) / RATE
    pitch = f0 * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(0.2, 0.6) * t))
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    signal = np.zeros_like(t)
    for harmonic in range(1, int(4000 // f0)):
        freq = harmonic * f0
        gain = sum(np.exp(-((freq - f) / 180.0) ** 2) for f in formants) + 0.05
        signal += gain / harmonic ** 0.5 * np.sin(harmonic * phase)
    return (signal / np.max(np.abs(signal))).astype(np.float32)


def utterance(voice: np.ndarray, index: int, seed: int, mean_seconds: float):
    rng = np.random.default_rng([seed, index])
    seconds = min(10.0, 0.5 + rng.exponential(max(0.01, mean_seconds - 0.5)))
    n = int(seconds * RATE)
    start = int(rng.integers(0, len(voice) - n)) if n < len(voice) else 0
    piece = np.resize(voice[start:], n)
    syllable_rate = rng.uniform(3.5, 5.5)
    t = np.arange(n) / RATE
    envelope = np.clip(np.sin(np.pi * syllable_rate * t + rng.uniform(0, np.pi)) ** 2, 0, 1)
    edge = int(0.08 * RATE)
    envelope[:edge] = 0
    envelope[n - edge:] = 0
    audio = piece * envelope * rng.uniform(0.2, 0.6)
    audio += rng.normal(0, 3e-4, n)
    words = max(1, int(round(seconds * 2.5)))
    text = " ".join("".join(rng.choice(SYLLABLES, int(rng.integers(1, 4)))) for _ in range(words))
    return (audio * 32767).astype(np.int16), text.capitalize() + "."


def write_chunk(args):
    out, first, last, total, speakers, seed, mean_seconds = args
    voices = {}
    rows = []
    for index in range(first, last):
        speaker = index * speakers // total  # consecutive utterances share a speaker
        uid = f"u{index:07d}"
        if speaker not in voices:
            voices = {speaker: speaker_voice(speaker)}
        audio, text = utterance(voices[speaker], index, seed, mean_seconds)
        path = os.path.join(out, "wavs", uid + ".wav")
        if not os.path.isfile(path):
            sf.write(path + ".part", audio, RATE, subtype="PCM_16", format="WAV")
            os.replace(path + ".part", path)
        rows.append(f"{uid}|{text}|{text}|spk{speaker:05d}\n")
    return first, rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--utterances", type=int, default=100000)
    parser.add_argument("--speakers", type=int, default=300)
    parser.add_argument("--mean-seconds", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    os.makedirs(os.path.join(args.out, "wavs"), exist_ok=True)
    start = time.time()
    chunks = [(args.out, i, min(args.utterances, i + CHUNK), args.utterances, args.speakers,
               args.seed,
               args.mean_seconds) for i in range(0, args.utterances, CHUNK)]
    rows = {}
    with multiprocessing.Pool(args.processes) as pool:
        for done, (first, chunk_rows) in enumerate(pool.imap_unordered(write_chunk, chunks), 1):
            rows[first] = chunk_rows
            if done % 25 == 0 or done == len(chunks):
                print(f"{done * CHUNK:,} utterances ({time.time() - start:.0f} s)",
                      file=sys.stderr, flush=True)
    tmp = os.path.join(args.out, "metadata.csv.part")
    with open(tmp, "w", encoding="utf-8") as f:
        for first in sorted(rows):
            f.writelines(rows[first])
    os.replace(tmp, os.path.join(args.out, "metadata.csv"))
    print(f"{args.utterances:,} utterances of {args.speakers:,} speakers in {args.out} "
          f"({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
