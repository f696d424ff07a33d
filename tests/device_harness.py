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


def train_tiny_reader(work: str, data: str, steps: int, **data_overrides) -> str:
    """Trains `steps` steps on `data` with the real CLI and returns the checkpoint directory:
    tiny.yaml widened a little and set up as configs/quick.yaml is (about one decoder step per
    character, a constant diagonal prior), since tiny itself does not read after a few hundred
    steps. `data_overrides` go into the config's data section."""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    config["data"].update(val_fraction=0.0, batch_size=8, **data_overrides)
    config["model"].update(d_model=64, prenet_dim=64, decoder_layers=2, reduction_factor=4,
                           max_decoder_steps=120)
    config["training"].update(validate_every_steps=steps, checkpoint_every_steps=steps,
                              learning_rate=3e-3, warmup_steps=30, lr_schedule="constant",
                              guided_attention_sigma=0.15, guided_attention_decay_steps=0)
    config_path = os.path.join(work, "tiny.yaml")
    with open(config_path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    run_dir = os.path.join(work, "run")
    done = run_cli(["--config", config_path, "--train-data", data, "--checkpoint-dir", run_dir,
                    "--max-steps", str(steps)], timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir
