"""What a run directory holds and how its checkpoints are found: the one place that knows the
file names (docs/architecture.md, "Checkpoint directory"), reads the `checkpoint` index and
parses the step from a checkpoint's name. Imports no TensorFlow, so the commands can check a
run before TensorFlow starts.

A run directory (train_main.py --checkpoint-dir) holds ckpt-<step>.index/.data-* files, the
`checkpoint` index naming them (relative to the folder), best/ (the same layout, one
checkpoint), config.yaml, vocab.json, model_info.json, data_split.json, tensorboard/, archive/
and, for the vocoder stage, gta/.
"""

from __future__ import annotations

import codecs
import os
import re
from typing import List, Optional

CONFIG_FILE = "config.yaml"
VOCAB_FILE = "vocab.json"
MODEL_INFO_FILE = "model_info.json"
SPLIT_FILE = "data_split.json"
INDEX_FILE = "checkpoint"
BEST_DIR = "best"
ARCHIVE_DIR = "archive"
TENSORBOARD_DIR = "tensorboard"
GTA_DIR = "gta"

_STEP = re.compile(r"ckpt-(\d+)$")
_FILE_SUFFIX = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")
_ENTRY = re.compile(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"(.*)"\s*$')


def step_of(path: str) -> Optional[int]:
    """The step in a checkpoint's name (DIR/ckpt-200 → 200); None for another name."""
    match = _STEP.search(strip_file_suffix(path))
    return int(match.group(1)) if match else None


def shown_path(path: str) -> str:
    """`path` relative to the working folder when it lies inside it (as the user typed it)."""
    relative = os.path.relpath(os.path.abspath(path))
    return path if relative.startswith("..") else relative


def strip_file_suffix(path: str) -> str:
    """A checkpoint prefix from one of its files (DIR/ckpt-200.index → DIR/ckpt-200)."""
    return _FILE_SUFFIX.sub("", path)


def exists(prefix: str) -> bool:
    """True when checkpoint `prefix` has its .index file."""
    return os.path.isfile(prefix + ".index")


def _unquote(text: str) -> str:
    """A text-proto string's value (the index escapes quotes, backslashes, non-ASCII bytes)."""
    return codecs.escape_decode(text.encode("utf-8"))[0].decode("utf-8")


def _read_index(directory: str):
    """(latest, all listed) from directory's `checkpoint` index, each entry as a path under
    `directory` (relative entries joined to it once; absolute ones as written)."""
    path = os.path.join(directory, INDEX_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, NotADirectoryError):
        return None, []
    latest, listed = None, []
    for line in lines:
        match = _ENTRY.match(line)
        if not match:
            continue
        entry = os.path.join(directory, _unquote(match.group(2)))
        if match.group(1) == "model_checkpoint_path":
            latest = entry
        else:
            listed.append(entry)
    if latest and latest not in listed:
        listed.append(latest)
    return latest, listed


def listed_checkpoints(directory: str) -> List[str]:
    """The checkpoint prefixes the index of `directory` lists, oldest first."""
    return _read_index(directory)[1]


def latest_checkpoint(directory: str) -> Optional[str]:
    """The index's latest checkpoint when its files exist (tf.train.latest_checkpoint's rule),
    else None."""
    latest = _read_index(directory)[0]
    return latest if latest and exists(latest) else None


def find_checkpoint(directory: str, which: Optional[str] = None) -> Optional[str]:
    """The checkpoint prefix `which` names in run `directory`: None/""/"latest" → the latest,
    "best" → best/'s, else a prefix or one of its files (as given, or inside `directory`).
    None when there is no such checkpoint."""
    if which in (None, "", "latest"):
        return latest_checkpoint(directory)
    if which == BEST_DIR:
        return latest_checkpoint(os.path.join(directory, BEST_DIR))
    prefix = strip_file_suffix(which)
    for candidate in (prefix, os.path.join(directory, prefix)):
        if exists(candidate):
            return candidate
    return None


def available_checkpoints(directory: str) -> List[str]:
    """The checkpoints of run `directory` and its best/, as names relative to it (messages)."""
    return [os.path.relpath(p, directory) for folder in (directory,
                                                        os.path.join(directory, BEST_DIR))
            for p in listed_checkpoints(folder)]
