"""A large corpus from start to restart: validation, the feature cache and a cached restart, each
timed in a fresh `train_main.py` process with its peak RSS.

    python benchmarks/make_scale_corpus.py --out corpora/scale1m --utterances 1000000 \
        --speakers 3000
    python benchmarks/bench_scale.py --corpus corpora/scale1m --run runs/scale/run1m

Phases, in this order (each one a process; times from its start, wall clock):
  first run         no validation cache, no feature cache: validate, cache the features, train
                    --steps steps (configs/tiny.yaml in cached mode). Times to the validation
                    table, to the cached features and to the first logged step.
  validate, warm    --validate-only with the validation caches of the first run.
  cached restart    the run resumes from its checkpoint and trains --steps more: times to
                    "Resumed from" and to the first step after it.
  validate, cold    --validate-only after deleting the validation caches (audio facts and the
                    saved result).
The corpus' `.myxtts_cache` and the run folder are deleted at the start. Prints the table and
writes it as JSON (--json).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MARKS = {"validated": re.compile(r"^Dataset validation|^\s*train: \d+ rows read"),
         "cached": re.compile(r"Cached train features|Using cached train features"),
         "resumed": re.compile(r"Resumed from"),
         "first step": re.compile(r"step (\d+) \(epoch \d+\): loss")}


def run(command, log_path):
    """Runs `command` from the repository root; returns (seconds, {mark: seconds}, peak RSS in
    GB, exit status), logging its output to `log_path`."""
    marks = {}
    started = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        for line in proc.stdout:
            log.write(line)
            for name, pattern in MARKS.items():
                if name not in marks and pattern.search(line.split("] ", 1)[-1]):
                    marks[name] = time.monotonic() - started
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return time.monotonic() - started, marks, usage.ru_maxrss / 1024 ** 2, proc.returncode


def config_file(run_dir, steps):
    """configs/tiny.yaml in cached mode, a step logged each step, checkpoints every `steps`."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config["data"].update(feature_mode="cached", val_fraction=0.002)
    config["training"].update(log_every_steps=1, checkpoint_every_steps=steps,
                              validate_every_steps=100000)
    path = os.path.join(run_dir + "-config.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--run", default="runs/scale/run")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    corpus, run_dir = os.path.abspath(args.corpus), os.path.abspath(args.run)
    cache = os.path.join(corpus, ".myxtts_cache")
    shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    config = config_file(run_dir, args.steps)
    train = [sys.executable, "train_main.py", "--config", config, "--train-data", corpus,
             "--checkpoint-dir", run_dir]
    validate = [sys.executable, "train_main.py", "--config", config, "--train-data", corpus,
                "--validate-only"]
    phases = [("first run", train + ["--max-steps", str(args.steps)], ()),
              ("validate, warm", validate, ()),
              ("cached restart", train + ["--max-steps", str(2 * args.steps)], ()),
              ("validate, cold", validate, ("validation_cache.json", "validated.json"))]
    results = {}
    for name, command, remove in phases:
        for path in [os.path.join(cache, name) for name in remove]:
            if os.path.exists(path):
                os.remove(path)
        log = f"{run_dir}-{name.replace(', ', '-').replace(' ', '-')}.log"
        seconds, marks, rss, status = run(command, log)
        results[name] = {"seconds": round(seconds, 1), "peak_rss_gb": round(rss, 2),
                         **{k: round(v, 1) for k, v in marks.items()}, "exit": status}
        print(f"{name}: {results[name]} (log {log})", flush=True)
        if status != 0:
            sys.exit(f"{name} failed; see {log}")
    cache_bytes = sum(os.path.getsize(os.path.join(folder, name))
                      for folder, _, names in os.walk(cache) for name in names)
    with open(os.path.join(corpus, "metadata.csv"), encoding="utf-8") as f:
        rows = sum(1 for _ in f)
    print(f"\n{rows:,} rows in {args.corpus}; {os.cpu_count()} CPU cores; cache "
          f"{cache_bytes / 1e9:.1f} GB")
    print(f"{'phase':<16}{'total s':>9}{'validated':>11}{'cached':>9}{'resumed':>9}"
          f"{'1st step':>10}{'peak RSS GB':>13}")
    for name, r in results.items():
        cells = [f"{r[k]:.1f}" if k in r else "-" for k in
                 ("validated", "cached", "resumed", "first step")]
        print(f"{name:<16}{r['seconds']:>9.1f}{cells[0]:>11}{cells[1]:>9}{cells[2]:>9}"
              f"{cells[3]:>10}{r['peak_rss_gb']:>13.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "cache_gb": round(cache_bytes / 1e9, 2), **results}, f,
                      indent=1)


if __name__ == "__main__":
    main()
