"""Reading a corpus's rows: a LibriTTS-shaped tree against the same rows as LJSpeech's
metadata.csv + wavs/, each read in a fresh process (time, `os.stat` calls, peak RSS).

    python benchmarks/bench_corpus_index.py --speakers 1000 --chapters 2 --utterances 50 \
        --out /tmp/corpus_index

Writes both corpora under --out (empty audio files: indexing never opens them), then reads each
with `corpora.read_source(corpora.find_source(DIR, "train"))`, the step every run (and
`--validate-only`) starts with. Prints one line per layout and their ratio.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_READ = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from myxtts.data import corpora
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
stats = [0]
real_stat = os.stat
def counting_stat(*args, **kwargs):
    stats[0] += 1
    return real_stat(*args, **kwargs)
os.stat = counting_stat
start = time.perf_counter()
rows, problems = corpora.read_source(corpora.find_source(sys.argv[2], "train"), "", "en")
seconds = time.perf_counter() - start
os.stat = real_stat
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"rows": len(rows), "with_audio": sum(r.audio_path is not None for r in rows),
                  "problems": len(problems), "seconds": seconds, "stat_calls": stats[0],
                  "peak_rss_mb": peak / 1024, "rss_added_mb": (peak - base) / 1024}))
"""


def write_corpora(out: str, speakers: int, chapters: int, utterances: int) -> None:
    libritts = os.path.join(out, "libritts", "train-clean-100")
    ljspeech = os.path.join(out, "ljspeech")
    os.makedirs(os.path.join(ljspeech, "wavs"))
    lines = []
    for s in range(speakers):
        speaker = str(100 + s)
        for c in range(chapters):
            chapter = str(1000 + c)
            folder = os.path.join(libritts, speaker, chapter)
            os.makedirs(folder)
            tsv = []
            for u in range(utterances):
                uid = f"{speaker}_{chapter}_{u:06d}_000000"
                text = f"Sentence {u} of chapter {chapter}, read by speaker {speaker}."
                open(os.path.join(folder, uid + ".wav"), "wb").close()
                open(os.path.join(ljspeech, "wavs", uid + ".wav"), "wb").close()
                tsv.append(f"{uid}\t{text}\t{text}\n")
                lines.append(f"{uid}|{text}|{text}|{speaker}\n")
            with open(os.path.join(folder, f"{speaker}_{chapter}.trans.tsv"), "w") as f:
                f.writelines(tsv)
    with open(os.path.join(ljspeech, "metadata.csv"), "w") as f:
        f.writelines(lines)


def read(folder: str) -> dict:
    result = subprocess.run([sys.executable, "-c", _READ, REPO, folder], capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speakers", type=int, default=1000)
    parser.add_argument("--chapters", type=int, default=2)
    parser.add_argument("--utterances", type=int, default=50, help="per chapter")
    parser.add_argument("--out", default="/tmp/corpus_index")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    write_corpora(args.out, args.speakers, args.chapters, args.utterances)
    results = {"ljspeech": read(os.path.join(args.out, "ljspeech")),
               "libritts": read(os.path.join(args.out, "libritts", "train-clean-100"))}
    for name, r in results.items():
        print(f"{name:9s} rows {r['rows']:,} (audio {r['with_audio']:,}, problems "
              f"{r['problems']}): {r['seconds']:.2f} s, {r['stat_calls']:,} os.stat calls, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB (+{r['rss_added_mb']:.0f} MB reading)")
    lj, lt = results["ljspeech"], results["libritts"]
    print(f"libritts / ljspeech: time {lt['seconds'] / lj['seconds']:.2f}x, added RSS "
          f"{lt['rss_added_mb'] / max(lj['rss_added_mb'], 1e-9):.2f}x, os.stat calls "
          f"{lt['stat_calls']} vs {lj['stat_calls']}")
    shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
