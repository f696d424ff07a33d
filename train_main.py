"""Train an XTTS-style text-to-speech model on a data device and a model device.

    python train_main.py --data-gpu 0 --model-gpu 1 --train-data DIR --val-data DIR \
        --batch-size 32 --epochs 100
    python train_main.py --device-check --data-gpu 0 --model-gpu 1

Device flags are parsed and applied BEFORE TensorFlow is imported (this file imports no
TensorFlow at module level; myxtts.devices.configure() does, after setting visible devices).
`python train_main.py --helpfull` documents every flag.
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app, flags

from myxtts import devices
from myxtts.config import XTTSConfig
from myxtts.errors import MyXTTSError

FLAGS = flags.FLAGS
logger = logging.getLogger("myxtts")
REPO_DIR = os.path.dirname(os.path.abspath(__file__))

# ---- devices: parsed before TensorFlow is imported --------------------------------------------
flags.DEFINE_integer("data-gpu", None, "Physical GPU index for data loading and feature "
                     "computation (becomes /GPU:0). Env: MYXTTS_DATA_GPU; the flag wins.")
flags.DEFINE_integer("model-gpu", None, "Physical GPU index for the model, optimizer and "
                     "training step (becomes /GPU:1). Env: MYXTTS_MODEL_GPU; the flag wins.")
flags.DEFINE_integer("data-gpu-memory", None, "Memory limit of the data device in MB "
                     "(default: memory growth, no limit).")
flags.DEFINE_integer("model-gpu-memory", None, "Memory limit of the model device in MB "
                     "(default: memory growth, no limit).")
flags.DEFINE_boolean("split-gpu", False, "When --data-gpu equals --model-gpu, split that GPU "
                     "into two logical GPUs (limits from --data-gpu-memory/--model-gpu-memory, "
                     "default 1/4 of its memory for data).")
flags.DEFINE_boolean("require-gpu", False, "Fail instead of falling back to two logical CPU "
                     "devices when no GPU is found.")
flags.DEFINE_boolean("device-check", False, "Configure devices, place a tensor on each, copy "
                     "data → model device, print the placements and exit.")

# ---- configuration ----------------------------------------------------------------------------
flags.DEFINE_string("config", "configs/base.yaml", "YAML preset (configs/tiny.yaml, small.yaml, "
                    "base.yaml); flags below override it.")

# ---- data ---------------------------------------------------------------------------------------
flags.DEFINE_string("train-data", None, "Training dataset folder: metadata.csv (or "
                    "metadata_train.csv + metadata_eval.csv) and wavs/ (see docs/data.md).")
flags.DEFINE_string("val-data", None, "Validation dataset folder (default: metadata_eval.csv "
                    "next to metadata_train.csv, else a seeded split of --train-data).")
flags.DEFINE_integer("batch-size", None, "Utterances per batch in the longest length bucket "
                     "(data.batch_size).")
flags.DEFINE_integer("buffer-size", None, "Batches prefetched onto the data device "
                     "(data.buffer_size).")
flags.DEFINE_integer("num-workers", None, "Parallel tf.data map calls; 0 = AUTOTUNE "
                     "(data.num_workers).")
flags.DEFINE_boolean("validate-only", False, "Validate the dataset(s), print the summary table "
                     "and statistics, write them to model_info.json in the checkpoint directory "
                     "and exit: 0 when enough usable rows remain, non-zero with the reason.")

# Flags that override a config field: flag name → dotted config key.
CONFIG_FLAGS = {
    "batch-size": "data.batch_size",
    "buffer-size": "data.buffer_size",
    "num-workers": "data.num_workers",
}


def _config_path(path: str) -> str:
    """A relative --config that is not found from the working directory is looked up in the
    repository, so `--config configs/tiny.yaml` works from anywhere."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(REPO_DIR, path)
    return candidate if os.path.exists(candidate) else path


def load_config() -> XTTSConfig:
    """The YAML preset with flag overrides applied (the resolved config that gets saved)."""
    config = XTTSConfig.from_yaml(_config_path(FLAGS.config))
    return config.override({key: FLAGS[flag].value for flag, key in CONFIG_FLAGS.items()},
                           source="command-line flags")


def setup_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(argv) -> int:
    if len(argv) > 1:
        raise MyXTTSError(f"Unexpected argument(s) {' '.join(argv[1:])}: every option is a flag "
                          f"(--name value). See `python train_main.py --helpfull`.")
    setup_logging()
    plan = devices.plan_devices(
        FLAGS["data-gpu"].value, FLAGS["model-gpu"].value,
        split_gpu=FLAGS["split-gpu"].value, require_gpu=FLAGS["require-gpu"].value,
        data_memory_mb=FLAGS["data-gpu-memory"].value,
        model_memory_mb=FLAGS["model-gpu-memory"].value)
    devices.configure(plan)
    logger.info("%s", devices.startup_report(plan))
    if FLAGS["device-check"].value:
        for line in devices.self_check(plan):
            print(line)
        return 0
    config = load_config()
    if FLAGS["validate-only"].value:
        return validate_only(config)
    raise MyXTTSError("Nothing to do: pass --device-check.")


def validate_only(config: XTTSConfig) -> int:
    """--validate-only: the dataset report and statistics, no training."""
    from myxtts.data.prepare import prepare_dataset  # pylint: disable=import-outside-toplevel
    if not FLAGS["train-data"].value:
        raise MyXTTSError("--validate-only needs --train-data DIR (a folder with metadata.csv "
                          "and wavs/).")
    work_dir = config.training.checkpoint_dir
    prepared = prepare_dataset(config, FLAGS["train-data"].value, FLAGS["val-data"].value,
                               work_dir=work_dir)
    print(prepared.report.table())
    print(f"\nvalidation rows: {prepared.val_source}")
    print(f"statistics written to {os.path.join(work_dir, 'model_info.json')}")
    print(f"OK: {len(prepared.items['train'])} usable training rows "
          f"(data.min_train_items = {config.data.min_train_items}).")
    return 0


def _guarded_main(argv) -> int:
    try:
        return main(argv)
    except MyXTTSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def run() -> None:
    """Console-script entry point (myxtts-train)."""
    app.run(_guarded_main)


if __name__ == "__main__":
    run()
