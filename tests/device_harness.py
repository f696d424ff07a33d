"""Runs the training command as users type it: `python train_main.py ARGS` from the repository.

Tests that need a process of their own for other reasons run a child module of tests/children
(see tests/children/__init__.py); everything else runs in the test run's process, on the two
logical CPU devices of tests/logical_devices.py.
"""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_cli(args, timeout: int = 600, env_extra=None):
    """Runs `python train_main.py ARGS` from the repo; returns the CompletedProcess."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, os.path.join(REPO, "train_main.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
