"""Runs code in a fresh Python process whose devices were configured by myxtts before TensorFlow
initialised: two logical CPU devices, /CPU:0 = data device, /CPU:1 = model device.

A probe prints one JSON object on its last stdout line; `run_probe` returns it as a dict.
"""

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import json, sys
from myxtts import devices
plan = devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))
import tensorflow as tf
"""


def run_probe(body: str, timeout: int = 300, prelude: str = PRELUDE) -> dict:
    """Runs PRELUDE + body; body must end by printing json.dumps(result)."""
    code = textwrap.dedent(prelude) + textwrap.dedent(body)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise AssertionError(f"probe failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [l for l in proc.stdout.strip().splitlines() if l.strip()]
    return json.loads(lines[-1])


def run_cli(args, timeout: int = 600, env_extra=None):
    """Runs `python train_main.py ARGS` from the repo; returns the CompletedProcess."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, os.path.join(REPO, "train_main.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
