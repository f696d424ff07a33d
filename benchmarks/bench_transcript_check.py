"""The transcript check on a corpus with planted faults: how many wrong transcripts it finds,
how many clean rows it flags, and its rate.

    for vb in slt:Isa awb:Matt rms:Luke kal16:John; do
      python samples/make_speech_corpus.py --out corpora/tc_${vb%%:*} --engine flite \
          --voice ${vb%%:*} --books ${vb##*:} --minutes 8 --prefix ${vb%%:*}
    done
    python benchmarks/bench_transcript_check.py --corpus corpora/tc_slt corpora/tc_awb \
        corpora/tc_rms corpora/tc_kal16 --out /tmp/tc_planted

Joins the corpora's metadata.csv (speaker: the folder name unless a row names one) with planted
faults (seeded): --swapped of the rows get another
row's transcript, --edited get a word dropped or added (alternately; an added word comes from
another row), the audio linked, not copied. Then runs the command a user runs,
`train_main.py --train-data OUT --config configs/tiny.yaml --validate-only
--check-transcripts`, in a fresh process, and compares the ids it writes with the planted ones.
"""

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def plant(corpora: list, out: str, swapped: float, edited: float, seed: int) -> dict:
    """Writes out/metadata.csv (+ out/wavs/ of links) and returns {id: kind} of the planted
    rows."""
    rows = []
    os.makedirs(os.path.join(out, "wavs"))
    for corpus in corpora:
        speaker = os.path.basename(os.path.normpath(corpus))
        with open(os.path.join(corpus, "metadata.csv"), encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    cols = line.rstrip("\n").split("|")
                    rows.append(cols[:3] + [cols[3] if len(cols) > 3 else speaker])
        for name in os.listdir(os.path.join(corpus, "wavs")):
            os.symlink(os.path.abspath(os.path.join(corpus, "wavs", name)),
                       os.path.join(out, "wavs", name))
    rng = random.Random(seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    n_swap, n_edit = round(swapped * len(rows)), round(edited * len(rows))
    planted = {}
    texts = [r[1] for r in rows]
    for k, index in enumerate(order[:n_swap + n_edit]):
        row = rows[index]
        if k < n_swap:
            other = rng.choice([t for t in texts if t != row[1]])
            new, kind = other, "swapped"
        else:
            words = row[1].split()
            position = rng.randrange(len(words))
            if (k - n_swap) % 2 == 0 and len(words) > 3:
                new, kind = " ".join(words[:position] + words[position + 1:]), "word dropped"
            else:
                word = rng.choice(rng.choice(texts).split()).strip(",;:.!?")
                new, kind = " ".join(words[:position] + [word] + words[position:]), "word added"
        row[1] = row[2] = new
        planted[row[0]] = kind
    with open(os.path.join(out, "metadata.csv"), "w", encoding="utf-8") as f:
        f.writelines("|".join(r) + "\n" for r in rows)
    with open(os.path.join(out, "planted.json"), "w", encoding="utf-8") as f:
        json.dump(planted, f, indent=1)
    return planted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, nargs="+",
                        help="LJSpeech-layout corpora (English), joined")
    parser.add_argument("--out", default="/tmp/tc_planted")
    parser.add_argument("--swapped", type=float, default=0.05)
    parser.add_argument("--edited", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    planted = plant(args.corpus, args.out, args.swapped, args.edited, args.seed)
    command = [sys.executable, "train_main.py", "--train-data", os.path.abspath(args.out),
               "--config", "configs/tiny.yaml", "--validate-only", "--check-transcripts"]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    report = result.stdout[result.stdout.index("Transcript check"):]
    print(report[:report.find("\n    ")] if "\n    " in report else report)
    heard = int(re.search(r"heard (\d+) rows", report).group(1))
    rate = float(re.search(r"\(([\d.]+) rows/s\)", report).group(1))
    with open(os.path.join(args.out, ".myxtts_cache", "suspect_transcripts.txt"),
              encoding="utf-8") as f:
        flagged = {line.split("\t")[0].strip() for line in f if line.strip()
                   and not line.startswith("#")}
    kinds = sorted(set(planted.values()))
    for kind in kinds:
        ids = [i for i, k in planted.items() if k == kind]
        print(f"{kind:13s} found {sum(i in flagged for i in ids)} of {len(ids)}"
              + "".join(f"\n    missed {i}" for i in ids if i not in flagged))
    wrong = sum(i in flagged for i in planted)
    clean = heard - len(planted)
    false = len(flagged - set(planted))
    print(f"wrong transcripts found: {wrong} of {len(planted)} ({100 * wrong / len(planted):.1f}%);"
          f" clean rows flagged: {false} of {clean} ({100 * false / clean:.1f}%); "
          f"{rate:.2f} rows/s on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
