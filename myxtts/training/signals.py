"""SIGINT/SIGTERM during training: finish the current step, save a checkpoint, exit. A second
signal gets the previous handler (exit immediately). Shared by both trainers."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Callable, Dict

logger = logging.getLogger("myxtts.training")


def install_stop_handlers(on_signal: Callable[[int], None]) -> Dict[int, object]:
    """Routes SIGINT and SIGTERM to `on_signal(signum)` once; returns the previous handlers for
    `restore_handlers` (nothing is installed outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}

    def handler(signum, _frame):
        logger.warning("%s received: saving a checkpoint after the current step, then "
                       "exiting (send it again to exit immediately).",
                       signal.Signals(signum).name)
        on_signal(signum)
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore_handlers(previous: Dict[int, object]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)
