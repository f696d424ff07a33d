"""A trained model for inference: the checkpoint directory's config.yaml + vocab.json + one
checkpoint (latest, best/ or a given prefix), model weights only.

The trainer saves tf.train.Checkpoint(model=..., optimizer=..., step=..., ...)
(myxtts.training.trainer). Inference restores only `model/` into a freshly built model, without
building an optimizer, ignores everything else (expect_partial) and refuses a checkpoint in which
any model weight has no value (a config.yaml or vocab.json from another run).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, List, Mapping, Optional

import keras
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.data.text import Tokenizer
from myxtts.errors import MyXTTSError
from myxtts.model_info import read_model_info
from myxtts.models.xtts import XTTSModel
from myxtts.run_directory import (BEST_DIR, CONFIG_FILE, VOCAB_FILE, available_checkpoints,
                                  find_checkpoint, strip_file_suffix)

logger = logging.getLogger("myxtts.inference")


class CheckpointNotFoundError(MyXTTSError, FileNotFoundError):
    """No usable checkpoint where the user pointed."""


class CheckpointMismatchError(MyXTTSError, ValueError):
    """The checkpoint does not hold the weights of the model its config.yaml describes."""


@dataclasses.dataclass
class LoadedCheckpoint:
    """What inference needs from a checkpoint directory."""

    directory: str
    checkpoint_path: str
    config: XTTSConfig
    tokenizer: Tokenizer
    model: XTTSModel
    model_info: Dict[str, Any]


def _is_vocoder_run(directory: str) -> bool:
    """Whether `directory` is a vocoder training's run: config.yaml, no vocab.json and a
    checkpoint of generator weights."""
    if os.path.isfile(os.path.join(directory, VOCAB_FILE)) or \
            not os.path.isfile(os.path.join(directory, CONFIG_FILE)):
        return False
    path = find_checkpoint(directory, None) or find_checkpoint(directory, BEST_DIR)
    try:
        return path is not None and any(name.startswith("generator/")
                                        for name, _ in tf.train.list_variables(path))
    except (tf.errors.OpError, ValueError):
        return False


def resolve_checkpoint(directory: str, checkpoint: Optional[str] = None) -> str:
    """The checkpoint prefix to load: `checkpoint` None/"latest" → newest ckpt-N, "best" →
    best/, else a prefix (absolute, or relative to `directory`; a trailing .index is fine)."""
    if not os.path.isdir(directory):
        raise CheckpointNotFoundError(
            f"The checkpoint directory {directory} does not exist: it should be the directory "
            f"train_main.py wrote (holding ckpt-N files, config.yaml and vocab.json).")
    if _is_vocoder_run(directory):
        raise CheckpointNotFoundError(
            f"{directory} is a vocoder run (train_main.py --stage vocoder: its checkpoints hold "
            f"a vocoder generator, not an acoustic model). Pass it as --vocoder-dir, and the "
            f"acoustic model's run (the --checkpoint-dir of the text-to-speech training, "
            f"holding {VOCAB_FILE}) as --checkpoint-dir.")
    for name in (CONFIG_FILE, VOCAB_FILE):
        if not os.path.isfile(os.path.join(directory, name)):
            raise CheckpointNotFoundError(
                f"{directory} has no {name}, so it is not a myxtts checkpoint directory "
                f"(train_main.py writes {CONFIG_FILE} and {VOCAB_FILE} next to the ckpt-N "
                f"files).")
    path = find_checkpoint(directory, checkpoint)
    if path is not None:
        return path
    available = ", ".join(available_checkpoints(directory)) or "none"
    if checkpoint in (None, "", "latest"):
        raise CheckpointNotFoundError(
            f"{directory} holds no checkpoint yet (no 'checkpoint' index pointing at ckpt-N "
            f"files; available: {available}): train first (train_main.py --checkpoint-dir "
            f"{directory} ...), or load 'best' if only best/ exists.")
    if checkpoint == BEST_DIR:
        raise CheckpointNotFoundError(
            f"{directory} has no best checkpoint ({BEST_DIR}/ is written after the first "
            f"validation). Available: {available}; or load the latest.")
    raise CheckpointNotFoundError(
        f"No checkpoint {checkpoint!r} in {directory} ({strip_file_suffix(checkpoint)}.index "
        f"not found there or as given). Available: {available}; or 'best', or the latest.")


def _unreachable_weights(root, model: keras.Model) -> List[str]:
    """Paths of model weights (the dropout seed state does not matter at inference) that no
    checkpoint path from `root` reaches."""
    reachable = {id(t) for t in tf.train.TrackableView(root).descendants()}
    return [v.path for v in model.weights if id(v) not in reachable]


# The decoding settings a model command's flag may replace (nothing trained depends on them).
DECODING_FLAGS = {"model.reference_statistics": "--reference-statistics",
                  "model.reference_matching": "--reference-matching"}


def load_checkpoint(directory: str, checkpoint: Optional[str] = None,
                    decoding: Optional[Mapping[str, Any]] = None) -> LoadedCheckpoint:
    """Builds the model from config.yaml/vocab.json in float32 and restores its weights;
    `decoding` ({DECODING_FLAGS key: value}; None values ignored) replaces the run's decoding
    settings (the model commands' flags)."""
    path = resolve_checkpoint(directory, checkpoint)
    config = XTTSConfig.from_yaml(os.path.join(directory, CONFIG_FILE))
    unknown = set(decoding or {}) - set(DECODING_FLAGS)
    if unknown:
        raise ValueError(f"not decoding settings: {', '.join(sorted(unknown))}")
    config.override(dict(decoding or {}), source=os.path.join(directory, CONFIG_FILE),
                    names=DECODING_FLAGS)
    tokenizer = Tokenizer.load(os.path.join(directory, VOCAB_FILE))
    # Inference runs in float32 whatever precision trained the model (its variables are float32
    # in every policy, so the checkpoint fits).
    keras.mixed_precision.set_global_policy("float32")
    model = restore_model(directory, path, config, tokenizer)
    return LoadedCheckpoint(directory, path, config, tokenizer, model, read_model_info(directory))


def restore_model(directory: str, path: str, config: XTTSConfig,
                  tokenizer: Tokenizer) -> XTTSModel:
    """A model built from the run's `config` and `tokenizer` (under the current precision
    policy and device) with the model weights of checkpoint `path` of run `directory`."""
    model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                      config.data.n_mels)
    root = tf.train.Checkpoint(model=model)
    problem = None
    missing = _unreachable_weights(root, model)
    if missing:
        problem = f"{len(missing)} weights have no checkpoint path, e.g. {missing[0]}"
    else:
        try:
            root.restore(path).expect_partial().assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            problem = str(e).splitlines()[0][:200]
    if problem:
        raise CheckpointMismatchError(
            f"Checkpoint {path} does not fit the model described by {directory}/{CONFIG_FILE} "
            f"and {VOCAB_FILE} ({problem}). Were they copied from another run? Use the "
            f"checkpoint directory exactly as training left it.")
    logger.info("Loaded %s (model weights only; %s parameters).", path,
                f"{model.count_params():,}")
    return model
