"""What every command-line entry point shares: the log format and how user errors end a run.

Imports no TensorFlow (train_main.py uses it before devices are configured).
"""

from __future__ import annotations

import logging
import sys
from typing import Callable, TypeVar

from myxtts.errors import MyXTTSError

T = TypeVar("T")


def setup_logging() -> None:
    """INFO lines with a time stamp on stderr; absl's INFO chatter (e.g. every captured input
    tf.saved_model.save renames) only from WARNING up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    logging.getLogger("absl").setLevel(logging.WARNING)


def run_guarded(main: Callable[[T], int], argv: T) -> int:
    """Runs `main(argv)`; a MyXTTSError (a problem the user can fix) is printed as one
    paragraph, without a traceback, and ends the run with exit status 2."""
    try:
        return main(argv)
    except MyXTTSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
