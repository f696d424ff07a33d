"""Child processes of the tests that are about a process (kill -9, resource limits, several
devices configured before TensorFlow starts, several workers, what a command imports at start-up).

The child of tests/test_<area>.py is tests/children/<area>.py, run from the repository as

    python -m tests.children.<area> ARGS

Every other test runs in pytest's own process. This package imports nothing but the standard
library (a child decides itself what it imports and when, e.g. its devices before TensorFlow).
"""

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def command(area: str, *args) -> list:
    """The command line that runs tests/children/<area>.py with ARGS (run it with cwd=REPO)."""
    return [sys.executable, "-m", f"tests.children.{area}", *map(str, args)]


def env(**extra) -> dict:
    """The environment of a child: this repository importable, no GPU, TensorFlow's INFO and
    WARNING lines off (override with extra)."""
    result = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
                  TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    result.update(extra)
    return result


def run_json(area: str, *args, timeout: int = 300) -> object:
    """Runs the child to completion; returns the JSON value on the last line of its stdout."""
    proc = subprocess.run(command(area, *args), capture_output=True, text=True, timeout=timeout,
                          env=env(), cwd=REPO)
    if proc.returncode != 0:
        raise AssertionError(f"tests.children.{area} failed (exit {proc.returncode}):\n"
                             f"{proc.stderr[-4000:]}")
    lines = [line for line in proc.stdout.strip().splitlines() if line.strip()]
    return json.loads(lines[-1])


def print_json(value) -> None:
    """What a child run by run_json prints last."""
    print(json.dumps(value), flush=True)
