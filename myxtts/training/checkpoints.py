"""The checkpoint directory (docs/architecture.md): ckpt-<step> via tf.train.CheckpointManager,
best/ (best validation loss, kept separately), config.yaml, vocab.json. No pickle anywhere.

Why a kill never costs a good checkpoint:
  * TensorFlow writes a checkpoint's shards under `ckpt-N_temp/` and renames them into place; the
    manager rewrites the `checkpoint` state file (atomically: temp file + rename) only AFTER that,
    and only after our callback has read the new checkpoint back. A kill before then leaves the
    state file pointing at the previous, complete checkpoint.
  * Old checkpoints are deleted only after the state file points at the new one.
  * A name is never written twice: checkpoints are named by step, a step already saved is not
    saved again, and before training continues from an OLDER checkpoint (--resume-from) or starts
    over (--reset-training) the existing ones are moved to archive/<time>/, never deleted.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import time
from typing import Any, Dict, Optional

import tensorflow as tf

from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.training")

BEST_DIR = "best"
ARCHIVE_DIR = "archive"
STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"


class CheckpointError(MyXTTSError, RuntimeError):
    """A checkpoint that cannot be read or does not fit the model; the message says what to do."""


def checkpoint_step(path: str) -> int:
    """The training step stored in checkpoint `path` (a prefix such as DIR/ckpt-200)."""
    return int(tf.train.load_checkpoint(path).get_tensor(STEP_KEY))


def resolve_checkpoint_path(path: str) -> str:
    """Accepts a checkpoint directory (→ its latest), a prefix (DIR/ckpt-200) or one of its files
    (DIR/ckpt-200.index); returns the prefix or raises CheckpointError."""
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"--resume-from {path}: that directory holds no checkpoint "
                                  f"(no 'checkpoint' file pointing at ckpt-N files). Pass a "
                                  f"checkpoint directory or a prefix such as {path}/ckpt-1000.")
        return latest
    path = re.sub(r"\.(index|data-\d{5}-of-\d{5})$", "", path)
    if not os.path.exists(path + ".index"):
        raise CheckpointError(f"--resume-from {path}: no checkpoint there ({path}.index does not "
                              f"exist). Pass a checkpoint directory or a prefix such as "
                              f"DIR/ckpt-1000.")
    return path


class CheckpointStore:
    """Saves and restores `objects` (a dict of trackables with a "step" variable) in `directory`."""

    def __init__(self, directory: str, objects: Dict[str, Any], keep: int):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.checkpoint = tf.train.Checkpoint(**objects)
        self._step_var = objects["step"]
        self._keep = keep
        self._remove_interrupted_writes()
        self._open_managers(keep)

    # -- queries -------------------------------------------------------------------------------
    @property
    def latest(self) -> Optional[str]:
        """The newest readable checkpoint in the directory (None when there is none)."""
        for path in reversed(self.manager.checkpoints):
            if self._readable(path):
                if path != self.manager.latest_checkpoint:
                    logger.warning("Checkpoint %s is not readable; using %s instead.",
                                   self.manager.latest_checkpoint, path)
                return path
        return None

    @property
    def best(self) -> Optional[str]:
        return self.best_manager.latest_checkpoint

    # -- saving --------------------------------------------------------------------------------
    def save(self, step: int) -> Optional[str]:
        """Saves as ckpt-<step> unless that step is already the latest checkpoint."""
        latest = self.manager.latest_checkpoint
        if latest and os.path.basename(latest) == f"ckpt-{step}":
            return None
        return self._save(self.manager, step)

    def save_best(self, step: int) -> str:
        return self._save(self.best_manager, step)

    def _save(self, manager: tf.train.CheckpointManager, step: int) -> str:
        def verify(save_path):
            # Runs after the files are in place and BEFORE the manager points its state file at
            # them: a checkpoint that cannot be read back never becomes "latest".
            if checkpoint_step(save_path) != step:
                raise CheckpointError(f"Checkpoint {save_path} did not read back step {step}.")

        options = tf.train.CheckpointOptions(experimental_write_callbacks=[verify])
        started = time.monotonic()
        path = manager.save(checkpoint_number=step, options=options)
        logger.info("Saved checkpoint %s (step %d, %.1f s)", path, step,
                    time.monotonic() - started)
        return path

    def write_sidecars(self, config, tokenizer) -> None:
        """config.yaml (the resolved config) and vocab.json (tokenizer.save), each written to a
        temporary name and renamed."""
        config.to_yaml(os.path.join(self.directory, "config.yaml"))
        if tokenizer is not None:
            tokenizer.save(os.path.join(self.directory, "vocab.json"))

    # -- restoring -----------------------------------------------------------------------------
    def restore(self, path: str) -> int:
        """Restores every object from `path`; returns its step. Raises CheckpointError when the
        checkpoint cannot be read or does not match the model that was built."""
        try:
            self.checkpoint.restore(path).assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as e:
            raise CheckpointError(
                f"Cannot restore checkpoint {path}: {str(e).splitlines()[0][:300]}. It was "
                f"probably written by a different model configuration (compare its config.yaml "
                f"with --config). To start from scratch in the same directory, pass "
                f"--reset-training (the old checkpoints are archived, not deleted).") from None
        return int(self._step_var.numpy())

    # -- starting over -------------------------------------------------------------------------
    def archive(self, reason: str) -> Optional[str]:
        """Moves checkpoints, best/, tensorboard/, config.yaml and vocab.json to
        archive/<time>/; returns that directory (None when there was nothing to move)."""
        names = [os.path.basename(p) for p in glob.glob(os.path.join(self.directory, "ckpt-*"))]
        names += [n for n in ("checkpoint", BEST_DIR, "tensorboard", "config.yaml", "vocab.json")
                  if os.path.exists(os.path.join(self.directory, n))]
        if not names:
            return None
        target = os.path.join(self.directory, ARCHIVE_DIR, time.strftime("%Y%m%d-%H%M%S"))
        suffix = 0
        while os.path.exists(target + (f"-{suffix}" if suffix else "")):
            suffix += 1
        target += f"-{suffix}" if suffix else ""
        os.makedirs(target)
        for name in sorted(names):
            shutil.move(os.path.join(self.directory, name), os.path.join(target, name))
        logger.warning("%s: moved %d earlier file(s) from %s to %s (nothing was deleted).",
                       reason, len(names), self.directory, target)
        self._open_managers(self._keep)
        return target

    # -- internals -----------------------------------------------------------------------------
    def _open_managers(self, keep: int) -> None:
        self.manager = tf.train.CheckpointManager(self.checkpoint, self.directory,
                                                  max_to_keep=keep, checkpoint_name="ckpt")
        self.best_manager = tf.train.CheckpointManager(
            self.checkpoint, os.path.join(self.directory, BEST_DIR), max_to_keep=1,
            checkpoint_name="ckpt")

    def _remove_interrupted_writes(self) -> None:
        # `<prefix>_temp/` holds the shards of a write that was interrupted before they were
        # renamed into place; nothing refers to it.
        for stale in glob.glob(os.path.join(self.directory, "ckpt-*_temp")) + glob.glob(
                os.path.join(self.directory, BEST_DIR, "ckpt-*_temp")):
            logger.warning("Removing %s, left by an interrupted checkpoint write.", stale)
            shutil.rmtree(stale, ignore_errors=True)

    @staticmethod
    def _readable(path: str) -> bool:
        try:
            checkpoint_step(path)
            return True
        except (tf.errors.OpError, ValueError):
            return False
