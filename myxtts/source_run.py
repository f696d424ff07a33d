"""Warm start (--init-from): the trained run a new run starts from, and the new run's config.

Before TensorFlow is imported, train_main.py calls `locate_source` (which run and checkpoint; file
checks only) and `warm_start_config`: what defines the model (myxtts.config.from_source_keys)
comes from the source run's config.yaml, the other model fields too unless the --config file sets
them, and the language table is the source's, extended by the languages of the new data. The
vocabulary is extended by myxtts.data.prepare, the weights are copied by
myxtts.training.warm_start. Nothing here or there writes into the source run.
This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

import yaml

from myxtts.config import XTTSConfig, from_source_keys
from myxtts.data import corpora
from myxtts.data.text import Tokenizer
from myxtts.errors import MyXTTSError
from myxtts.model_info import read_model_info
from myxtts.run_directory import BEST_DIR, CONFIG_FILE, INDEX_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts")

class SourceRunError(MyXTTSError, ValueError):
    """The run a warm start names cannot be used, or the new run's config contradicts it."""


RESUME_CONFLICT = ("A warm start and a resume contradict each other: a warm start begins a new "
                   "run from another run's weights, a resume continues a run from its own "
                   "checkpoint. Ask for one of them.")


@dataclasses.dataclass(frozen=True)
class Source:
    """A trained run: its directory, which checkpoint (None = latest, "best" or a prefix), its
    resolved config and its vocabulary."""

    directory: str
    checkpoint: Optional[str]
    config: XTTSConfig
    tokenizer: Tokenizer

    @property
    def vocab_path(self) -> str:
        return os.path.join(self.directory, VOCAB_FILE)


def _is_run(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, CONFIG_FILE))


def locate_source(path: str) -> Source:
    """The run a warm start names: a run directory (its latest checkpoint), DIR/best, or a
    checkpoint prefix (DIR/ckpt-N, DIR/best/ckpt-N; a trailing .index is fine)."""
    hint = ("A warm-start source is the directory of a trained run (its latest checkpoint is "
            "used), DIR/best for its best checkpoint, or a checkpoint prefix such as "
            "DIR/ckpt-2000.")
    path = os.path.normpath(path[: -len(".index")] if path.endswith(".index") else path)
    if os.path.isdir(path):
        folder, checkpoint = path, None
        if os.path.basename(path) == BEST_DIR and not _is_run(path):
            folder, checkpoint = os.path.dirname(path), BEST_DIR
        index = os.path.join(path, INDEX_FILE)
        if not os.path.isfile(index):
            raise SourceRunError(f"The warm-start source {path} holds no checkpoint ({index} "
                                 f"does not exist). {hint}")
    elif os.path.isfile(path + ".index"):
        folder, checkpoint = os.path.dirname(path), os.path.abspath(path)
        if os.path.basename(folder) == BEST_DIR and not _is_run(folder):
            folder = os.path.dirname(folder)
    else:
        raise SourceRunError(f"The warm-start source {path} does not exist. {hint}")
    for name in (CONFIG_FILE, VOCAB_FILE):
        if not os.path.isfile(os.path.join(folder, name)):
            raise SourceRunError(f"The warm-start source {path}: {folder} has no {name}, so it "
                                 f"is not a run directory (training writes {CONFIG_FILE} and "
                                 f"{VOCAB_FILE} next to the checkpoints). {hint}")
    return Source(folder, checkpoint, XTTSConfig.from_yaml(os.path.join(folder, CONFIG_FILE)),
                  Tokenizer.load(os.path.join(folder, VOCAB_FILE)))


def continued_run(work_dir: str) -> Optional[Source]:
    """A warm-started run in `work_dir` continued without --init-from: its own config.yaml and
    vocab.json hold the source's model and the extended languages, so they play the source's
    part (and the --config file that started it, which sets no model fields, fits again)."""
    if not (_is_run(work_dir) and read_model_info(work_dir).get("init_from")):
        return None
    return Source(work_dir, None, XTTSConfig.from_yaml(os.path.join(work_dir, CONFIG_FILE)),
                  Tokenizer.load(os.path.join(work_dir, VOCAB_FILE)))


def _explicit_keys(config_path: str) -> set:
    """Dotted keys the YAML file sets (the file parsed already, as the config)."""
    with open(config_path, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    return {f"{section}.{key}" for section, values in raw.items() for key in (values or {})}


def _get(config: XTTSConfig, dotted: str):
    section, key = dotted.split(".")
    return getattr(getattr(config, section), key)


def warm_start_config(config: XTTSConfig, config_path: str, source: Source, train_dir: str,
                      val_dir: Optional[str]) -> XTTSConfig:
    """The new run's config: `config` (from `config_path` + flags) with the model taken from
    `source`. UsageError naming every field where `config_path` sets a value the source's model
    was not trained with."""
    explicit = _explicit_keys(config_path)
    defining = from_source_keys()
    differing = [f"{key}: {_get(config, key)!r} (source: {_get(source.config, key)!r})"
                 for key in defining
                 if key in explicit and _get(config, key) != _get(source.config, key)]
    if differing:
        raise SourceRunError(
            f"{config_path} sets fields that define the model to other values than "
            f"{os.path.join(source.directory, CONFIG_FILE)}, the model this run starts from: "
            f"{'; '.join(differing)}. In a warm start the source run's config.yaml decides the "
            f"model: remove these keys from {config_path} (configs/finetune.yaml sets none of "
            f"them), or train from scratch, without a warm start, in a new run directory.")
    inherited = defining + [f"model.{f.name}" for f in dataclasses.fields(config.model)
                            if f"model.{f.name}" not in explicit]
    for key in inherited:
        section, name = key.split(".")
        setattr(getattr(config, section), name, _get(source.config, key))

    d, old = config.data, list(source.config.data.languages)
    if "data.default_language" not in explicit:
        d.default_language = source.config.data.default_language
    wanted = (d.languages if "data.languages" in explicit else []) + [d.default_language] + \
        corpora.dataset_languages(train_dir, val_dir, d.default_language, d.format,
                                  d.vctk_mic)
    added = [language for i, language in enumerate(wanted)
             if language not in old and language not in wanted[:i]]
    d.languages = old + added
    config.validate(config_path)
    logger.info("Model as %s defines it (%s); languages %s kept with their ids%s.",
                os.path.join(source.directory, CONFIG_FILE),
                ", ".join(f"{k.split('.')[1]} {_get(config, k)}" for k in (
                    "model.d_model", "model.decoder_layers", "data.n_mels", "data.sample_rate")),
                ", ".join(old), f", {', '.join(added)} added for the new data" if added else
                ", none added")
    return config
