"""Builds a single-speaker LJSpeech-style corpus offline: public-domain text (King James Bible,
`bible` from Debian's bible-kjv) spoken by espeak-ng or flite, 16 kHz mono WAV, silence trimmed.

    apt-get install espeak-ng flite sox bible-kjv
    python samples/make_speech_corpus.py --out corpora/espeak_m --engine espeak --voice en-us \
        --books Gen,Exod,Num,Deut --minutes 45
    python samples/make_speech_corpus.py --out corpora/flite_slt --engine flite --voice slt \
        --books Prov,Ps,Isa,Matt --minutes 45

Verses are cut at clause punctuation into pieces of --min-chars..--max-chars characters, so
utterances are 1.5-7 s long. It stops once --minutes of audio are written. These corpora are
what configs/quick.yaml is trained and judged on (docs/results.md); they are not committed.
"""

import argparse
import os
import re
import subprocess
import tempfile

import soundfile as sf


def verses(book: str):
    """Every verse of `book` in order, as plain text (wrapped lines joined)."""
    for chapter in range(1, 151):
        out = subprocess.run(["bible", "-f", f"{book} {chapter}:1-200"], capture_output=True,
                             text=True, check=True).stdout
        text = re.sub(r"\s*\n\s*(?![1-3]?[A-Z][a-z]*\d+:\d+ )", " ", out)
        found = False
        for line in text.splitlines():
            m = re.match(r"^[1-3]?[A-Za-z]+?(\d+):\d+ (.*)$", line.strip())
            if m and int(m.group(1)) == chapter:
                found = True
                yield m.group(2).strip()
        if not found:
            return


def pieces(verse: str, min_chars: int, max_chars: int):
    """Splits a verse at clause punctuation and joins neighbours up to max_chars."""
    clauses = [c.strip() for c in re.split(r"(?<=[;:,.?!])\s+", verse) if c.strip()]
    current = ""
    for clause in clauses:
        joined = f"{current} {clause}".strip()
        if len(joined) <= max_chars:
            current = joined
            continue
        if min_chars <= len(current) <= max_chars:
            yield current
        current = clause
    if min_chars <= len(current) <= max_chars:
        yield current


def speak(engine: str, voice: str, text: str, path: str, tmp: str) -> None:
    raw = os.path.join(tmp, "raw.wav")
    if engine == "espeak":
        subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "-w", raw, text], check=True)
    else:
        subprocess.run(["flite", "-voice", voice, "-t", text, "-o", raw], check=True)
    # 16 kHz mono 16-bit, leading/trailing silence trimmed, peak-normalised to -3 dBFS.
    subprocess.run(["sox", raw, "-r", "16000", "-c", "1", "-b", "16", path,
                    "silence", "1", "0.03", "0.1%", "reverse", "silence", "1", "0.03", "0.1%",
                    "reverse", "gain", "-n", "-3"], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", choices=["espeak", "flite"], default="espeak")
    parser.add_argument("--voice", default="en-us")
    parser.add_argument("--books", default="Gen,Exod")
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--min-chars", type=int, default=25)
    parser.add_argument("--max-chars", type=int, default=90)
    parser.add_argument("--prefix", default="U")
    args = parser.parse_args()
    os.makedirs(os.path.join(args.out, "wavs"), exist_ok=True)
    rows, seconds = [], 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for book in args.books.split(","):
            for verse in verses(book):
                for text in pieces(verse, args.min_chars, args.max_chars):
                    uid = f"{args.prefix}{len(rows) + 1:05d}"
                    path = os.path.join(args.out, "wavs", f"{uid}.wav")
                    speak(args.engine, args.voice, text, path, tmp)
                    seconds += sf.info(path).duration
                    rows.append(f"{uid}|{text}|{text}")
                    if seconds >= args.minutes * 60:
                        break
                if seconds >= args.minutes * 60:
                    break
            if seconds >= args.minutes * 60:
                break
    with open(os.path.join(args.out, "metadata.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    print(f"wrote {len(rows)} utterances, {seconds / 60:.1f} min, to {args.out}")


if __name__ == "__main__":
    main()
