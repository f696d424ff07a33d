"""What every command-line entry point shares: the log format, a quiet TensorFlow start, cheap
argument checks and how user errors end a run.

Imports no TensorFlow (train_main.py uses it before devices are configured).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
from typing import Callable, Iterator, TypeVar

from myxtts.errors import MyXTTSError

T = TypeVar("T")

# TensorFlow's start-up lines that say nothing about the run: absl's notice about logging before
# its initialisation, the oneDNN notice, no CUDA driver on a CPU-only machine, CPU instructions.
# They are written before TF_CPP_MIN_LOG_LEVEL takes effect, so they are filtered.
_STARTUP_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR|I0000 \S+ +\d+ (port|cudart_stub|cpu_feature_guard)\.cc:\d+\] |To enable the "
    r"following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$)")


class UsageError(MyXTTSError, ValueError):
    """Contradictory, missing or invalid command-line options."""


def setup_logging() -> None:
    """INFO lines with a time stamp on stderr; absl's and TensorFlow's INFO chatter (e.g. every
    captured input tf.saved_model.save renames, its temporary asset folder) only from WARNING
    up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextlib.contextmanager
def quiet_tensorflow_start(verbose: bool = False) -> Iterator[None]:
    """Wrap the code that first imports TensorFlow: unless `verbose`, its C++ start-up lines and
    E0000 lines are kept off the console.

    Sets TF_CPP_MIN_LOG_LEVEL=3 (unless the environment already sets it), which hides
    TensorFlow's C++ INFO/WARNING/ERROR log lines, e.g. `failed call to cuInit ... (303)` on
    CPU-only machines; failures still raise Python errors, and Python warnings and myxtts logs
    are unaffected. The lines written while the libraries load ignore that setting; they are
    filtered from stderr inside the block, everything else written there is passed on.
    """
    if verbose:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _STARTUP_NOISE.match(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def require_path(flag: str, path: str, kind: str, expected: str) -> None:
    """UsageError naming `flag` unless `path` is an existing directory (`kind` "dir") or file
    ("file"); `expected` says what it should be (e.g. "the folder train_main.py wrote")."""
    if os.path.isdir(path) if kind == "dir" else os.path.isfile(path):
        return
    problem = "does not exist" if not os.path.exists(path) else (
        f"is not a {'folder' if kind == 'dir' else 'file'}")
    raise UsageError(f"{flag} {path} {problem}. Pass {expected}.")


def run_guarded(main: Callable[[T], int], argv: T) -> int:
    """Runs `main(argv)`; a MyXTTSError (a problem the user can fix) is printed as one
    paragraph, without a traceback, and ends the run with exit status 2."""
    try:
        return main(argv)
    except MyXTTSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
