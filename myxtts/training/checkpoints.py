"""The checkpoint directory (docs/architecture.md): ckpt-<step>, best/ (best validation loss, kept
separately), config.yaml, vocab.json. No pickle anywhere.

Why a kill, a full disk or a damaged file never costs a good checkpoint:
  * TensorFlow writes a checkpoint's shards under `ckpt-N_temp/` and renames them into place; the
    store reads the new checkpoint back and only then rewrites the `checkpoint` index (temp file,
    fsync, rename) to list it. A kill before then leaves the index naming the previous, complete
    checkpoints.
  * The index is rewritten WITHOUT the checkpoints beyond training.keep_checkpoints before their
    files are deleted, so it never names a checkpoint whose files are gone. (tf.train.
    CheckpointManager deletes first and rewrites the index after; that gap is why it is not used.)
  * A write that fails (disk full) removes its partial files and raises CheckpointError naming the
    intact previous checkpoint.
  * Resuming restores the newest checkpoint that reads back intact (TensorFlow checksums every
    tensor); a damaged newer one is moved to archive/<time>/ with a warning.
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
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError
from myxtts.run_directory import (ARCHIVE_DIR, BEST_DIR, CONFIG_FILE, INDEX_FILE, TENSORBOARD_DIR,
                                  VOCAB_FILE, exists, latest_checkpoint, listed_checkpoints,
                                  step_of, strip_file_suffix)

logger = logging.getLogger("myxtts.training")

STEP_KEY = "step/.ATTRIBUTES/VARIABLE_VALUE"
# Objects that checkpoints written by older versions lack; restoring such a checkpoint leaves
# them at their initial values.
ADDED_LATER = ("minutes_trained", "schedule_position")
_CHECKPOINT_FILE = re.compile(r"ckpt-(\d+)\.(index|data-\d{5}-of-\d{5})$")


class CheckpointError(MyXTTSError, RuntimeError):
    """A checkpoint that cannot be read or does not fit the model; the message says what to do."""


class DamagedCheckpointError(CheckpointError):
    """A checkpoint whose files are missing, truncated or altered."""


def checkpoint_step(path: str) -> int:
    """The training step stored in checkpoint `path` (a prefix such as DIR/ckpt-200)."""
    return int(tf.train.load_checkpoint(path).get_tensor(STEP_KEY))


def resolve_checkpoint_path(path: str) -> str:
    """Accepts a checkpoint directory (→ its latest), a prefix (DIR/ckpt-200) or one of its files
    (DIR/ckpt-200.index); returns the prefix or raises CheckpointError."""
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(f"--resume-from {path}: that directory holds no checkpoint "
                                  f"(no 'checkpoint' file pointing at ckpt-N files). Pass a "
                                  f"checkpoint directory or a prefix such as {path}/ckpt-1000.")
        return latest
    path = strip_file_suffix(path)
    if not exists(path):
        raise CheckpointError(f"--resume-from {path}: no checkpoint there ({path}.index does not "
                              f"exist). Pass a checkpoint directory or a prefix such as "
                              f"DIR/ckpt-1000.")
    return path


def _first_line(error: BaseException) -> str:
    """The first line of an error's message, without TensorFlow's `{{function_node ...}}`."""
    line = (str(error).splitlines() or [type(error).__name__])[0]
    return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line)[:300]


def checkpoints_on_disk(directory: str) -> List[str]:
    """Every ckpt-<step> prefix in `directory` whose .index file exists, oldest first, whether
    or not the index lists it."""
    steps = sorted({int(m.group(1)) for m in map(_CHECKPOINT_FILE.match, os.listdir(directory))
                    if m and m.group(2) == "index"}) if os.path.isdir(directory) else []
    return [os.path.join(directory, f"ckpt-{step}") for step in steps]


def _missing(path: str) -> bool:
    """True when checkpoint `path` has no files at all (not damaged: absent)."""
    return not _checkpoint_files(path)


def _checkpoint_files(path: str) -> List[str]:
    """The files of checkpoint prefix `path` (its .index and .data-* shards)."""
    return glob.glob(glob.escape(path) + ".index") + glob.glob(glob.escape(path) + ".data-*")


def _remove(paths: List[str]) -> None:
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass


class CheckpointSeries:
    """The checkpoints ckpt-<step> of one directory that its `checkpoint` index lists, oldest
    first; keeps the newest `keep`."""

    def __init__(self, directory: str, keep: int):
        self.directory = directory
        self.keep = keep
        os.makedirs(directory, exist_ok=True)
        self.paths = listed_checkpoints(directory)

    @property
    def latest(self) -> Optional[str]:
        return self.paths[-1] if self.paths else None

    def prefix(self, step: int) -> str:
        return os.path.join(self.directory, f"ckpt-{step}")

    def add(self, path: str) -> None:
        """Lists `path` (complete on disk) as the latest; then deletes the files of the
        checkpoints beyond `keep`, and leftovers of an earlier interrupted deletion."""
        self.write_index(([p for p in self.paths if p != path] + [path])[-self.keep:])
        oldest = step_of(self.paths[0])
        for name in os.listdir(self.directory):
            match = _CHECKPOINT_FILE.match(name)
            if match and int(match.group(1)) < oldest:
                _remove([os.path.join(self.directory, name)])

    def write_index(self, paths: List[str]) -> None:
        """Replaces the index with `paths` (the last is the latest) atomically."""
        names = [os.path.relpath(p, self.directory) for p in paths]
        text = "".join([f'model_checkpoint_path: "{names[-1]}"\n'] +
                       [f'all_model_checkpoint_paths: "{name}"\n' for name in names])
        atomic_write(os.path.join(self.directory, INDEX_FILE), text)
        self.paths = list(paths)


class CheckpointStore:
    """Saves and restores `objects` (a dict of trackables with a "step" variable) in `directory`."""

    def __init__(self, directory: str, objects: Dict[str, Any], keep: int):
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self._objects = dict(objects)
        self.checkpoint = tf.train.Checkpoint(**objects)
        # restore() creates this counter when missing and then expects a value for it; creating
        # it now makes write() save it too (and keeps checkpoints from older versions loadable).
        self.checkpoint.save_counter  # pylint: disable=pointless-statement
        self._step_var = objects["step"]
        self._keep = keep
        self._remove_interrupted_writes()
        self._open_series()

    # -- queries -------------------------------------------------------------------------------
    @property
    def latest(self) -> Optional[str]:
        """The newest readable checkpoint in the directory (None when there is none)."""
        for path in reversed(self.series.paths):
            if self._readable(path):
                if path != self.series.latest:
                    logger.warning("Checkpoint %s is not readable; using %s instead.",
                                   self.series.latest, path)
                return path
        return None

    @property
    def best(self) -> Optional[str]:
        return self.best_series.latest

    # -- saving --------------------------------------------------------------------------------
    def save(self, step: int) -> Optional[str]:
        """Saves as ckpt-<step> unless that step is already saved."""
        return self._save(self.series, step)

    def save_best(self, step: int) -> Optional[str]:
        return self._save(self.best_series, step)

    def _save(self, series: CheckpointSeries, step: int) -> Optional[str]:
        path = series.prefix(step)
        if path in series.paths:
            return None
        started = time.monotonic()
        try:
            self.checkpoint.write(path)
            # Read back BEFORE the index names it: a checkpoint that cannot be read back never
            # becomes "latest".
            if checkpoint_step(path) != step:
                raise CheckpointError(f"Checkpoint {path} did not read back step {step}.")
            series.add(path)
        except (tf.errors.OpError, OSError, CheckpointError) as e:
            # Nothing lists `path` (it was not in the index, and the index write failed or did
            # not happen): its partial files only take space.
            _remove([path + "_temp"] + _checkpoint_files(path))
            previous = series.latest
            size = sum(os.path.getsize(f) for f in _checkpoint_files(previous)) if previous else 0
            raise CheckpointError(
                f"Could not save checkpoint {path}: {_first_line(e)}. Its partial files were "
                f"removed; the previous checkpoint ({previous or 'none yet'}) is intact, and "
                f"running the same command again resumes from it. If the disk is full, free "
                f"space first (a checkpoint takes {size / 1e6:.1f} MB here; training."
                f"keep_checkpoints = {self._keep} are kept).") from None
        logger.info("Saved checkpoint %s (step %d, %.1f s)", path, step,
                    time.monotonic() - started)
        return path

    def write_sidecars(self, config, tokenizer) -> None:
        """config.yaml (the resolved config) and vocab.json (tokenizer.save), each written to a
        temporary name and renamed."""
        config.to_yaml(os.path.join(self.directory, CONFIG_FILE))
        if tokenizer is not None:
            tokenizer.save(os.path.join(self.directory, VOCAB_FILE))

    # -- restoring -----------------------------------------------------------------------------
    def restore(self, path: str) -> int:
        """Restores every object from `path`; returns its step. Raises CheckpointError when the
        checkpoint cannot be read or does not match the model that was built."""
        try:
            self._checkpoint_for(path).restore(path).assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError, IndexError) as e:
            damage = self._damage(path)
            if damage:
                raise DamagedCheckpointError(f"Cannot restore checkpoint {path}: it is damaged "
                                             f"({damage}).") from None
            raise CheckpointError(
                f"Cannot restore checkpoint {path}: {_first_line(e)}. It was "
                f"probably written by a different model or optimizer configuration (compare "
                f"its config.yaml with --config: the model fields, training.optimizer, "
                f"training.ema_momentum). To start from scratch in the same directory, pass "
                f"--reset-training (the old checkpoints are archived, not deleted).") from None
        return int(self._step_var.numpy())

    def _checkpoint_for(self, path: str) -> tf.train.Checkpoint:
        """The checkpoint object that restores `path`: without the ADDED_LATER objects that an
        older version's checkpoint lacks."""
        stored = {name for name, _ in tf.train.list_variables(path)}
        absent = [name for name in ADDED_LATER
                  if name in self._objects and f"{name}/.ATTRIBUTES/VARIABLE_VALUE" not in stored]
        if not absent:
            return self.checkpoint
        logger.info("Checkpoint %s holds no %s (an older version, or training.lr_clock off "
                    "when it was written): %s at 0.", path, " or ".join(absent),
                    "it starts" if len(absent) == 1 else "they start")
        return tf.train.Checkpoint(**{k: v for k, v in self._objects.items()
                                      if k not in absent})

    def restore_latest(self) -> Optional[Tuple[str, int]]:
        """Restores the newest intact checkpoint the index lists; returns (path, step), or None
        when there is none. Listed checkpoints whose files are missing are dropped from the
        index; damaged ones (truncated or altered files) are moved to archive/<time>/; both with
        a warning. When no listed checkpoint is intact, the newest intact ckpt-N file in the
        folder is used (and listed). CheckpointError when none is intact or one does not fit
        the model."""
        missing, damaged = [], []
        for path in reversed(self.series.paths):
            if _missing(path):
                missing.append(path)
                logger.warning("Checkpoint %s is listed in %s but its files are missing "
                               "(not damaged: absent).", path,
                               os.path.join(self.directory, INDEX_FILE))
                continue
            try:
                step = self.restore(path)
            except DamagedCheckpointError as e:
                damaged.append(path)
                logger.warning("%s", e)
                continue
            if missing or damaged:
                self._set_aside(missing, damaged, path)
            return path, step
        restored = self._restore_unlisted(missing, damaged)
        if restored:
            return restored
        if missing or damaged:
            what = []
            if missing:
                what.append(f"the index lists {', '.join(missing)} whose files are missing")
            if damaged:
                what.append(f"{', '.join(damaged)} {'is' if len(damaged) == 1 else 'are'} "
                            f"damaged (see the warnings above)")
            raise CheckpointError(
                f"No checkpoint in {self.directory} can be restored: {'; '.join(what)}, and no "
                f"other ckpt-N file in the folder reads back intact. If the run was moved or "
                f"copied, resume from the complete copy with --resume-from PATH; to start over "
                f"instead, pass --reset-training (the files are moved to archive/, not "
                f"deleted).")
        return None

    def restore_latest_of(self, directory: str) -> Optional[Tuple[str, int]]:
        """Restores the newest checkpoint of ANOTHER directory's index that restores intact (a
        worker that is not the chief follows the chief's run) and changes nothing there;
        returns (path, step), or None when it holds none."""
        for path in reversed(listed_checkpoints(directory)):
            if _missing(path):
                logger.warning("Checkpoint %s is listed in %s but its files are missing.", path,
                               os.path.join(directory, INDEX_FILE))
                continue
            try:
                return path, self.restore(path)
            except DamagedCheckpointError as e:
                logger.warning("%s", e)
        return None

    def _restore_unlisted(self, missing: List[str],
                          damaged: List[str]) -> Optional[Tuple[str, int]]:
        """No listed checkpoint restored: the newest intact ckpt-N in the folder that the index
        does not list (an index written elsewhere, or by an older version) becomes the latest."""
        listed = {os.path.normpath(p) for p in self.series.paths}
        on_disk = checkpoints_on_disk(self.directory)
        for path in reversed([p for p in on_disk if os.path.normpath(p) not in listed]):
            try:
                step = self.restore(path)
            except DamagedCheckpointError as e:
                logger.warning("%s", e)
                continue
            if damaged:
                self._set_aside([], damaged, path)
            older = [p for p in on_disk if step_of(p) <= step_of(path)
                     and os.path.normpath(p) not in {os.path.normpath(d) for d in damaged}]
            self.series.write_index(older[-self._keep:])
            logger.warning("Resuming from %s: the index of %s did not list it (%s); it now "
                           "lists the intact checkpoints in the folder.", path, self.directory,
                           "the checkpoints it listed are missing or damaged" if missing or damaged
                           else "it listed none")
            return path, step
        return None

    def _set_aside(self, missing: List[str], damaged: List[str], intact: str) -> None:
        # The index stops naming the missing and damaged checkpoints before the files move.
        self.series.write_index([p for p in self.series.paths
                                 if p not in missing and p not in damaged])
        if missing:
            logger.warning("Resuming from %s, the newest intact checkpoint; the index no longer "
                           "lists %s, whose files are missing.", intact, ", ".join(missing))
        if not damaged:
            return
        target = self._archive_target()
        for path in damaged:
            for name in _checkpoint_files(path):
                shutil.move(name, os.path.join(target, os.path.basename(name)))
        logger.warning("Resuming from %s, the newest intact checkpoint; the damaged %s moved to "
                       "%s (nothing was deleted).", intact, ", ".join(damaged), target)

    # -- starting over -------------------------------------------------------------------------
    def archive(self, reason: str) -> Optional[str]:
        """Moves checkpoints, best/, tensorboard/, config.yaml and vocab.json to
        archive/<time>/; returns that directory (None when there was nothing to move)."""
        names = [os.path.basename(p) for p in glob.glob(os.path.join(self.directory, "ckpt-*"))]
        names += [n for n in (INDEX_FILE, BEST_DIR, TENSORBOARD_DIR, CONFIG_FILE, VOCAB_FILE)
                  if os.path.exists(os.path.join(self.directory, n))]
        if not names:
            return None
        target = self._archive_target()
        for name in sorted(names):
            shutil.move(os.path.join(self.directory, name), os.path.join(target, name))
        logger.warning("%s: moved %d earlier file(s) from %s to %s (nothing was deleted).",
                       reason, len(names), self.directory, target)
        self._open_series()
        return target

    # -- internals -----------------------------------------------------------------------------
    def _archive_target(self) -> str:
        """A new, empty archive/<time>[-n]/ directory."""
        target = os.path.join(self.directory, ARCHIVE_DIR, time.strftime("%Y%m%d-%H%M%S"))
        suffix = 0
        while os.path.exists(target + (f"-{suffix}" if suffix else "")):
            suffix += 1
        target += f"-{suffix}" if suffix else ""
        os.makedirs(target)
        return target

    def _open_series(self) -> None:
        self.series = CheckpointSeries(self.directory, self._keep)
        self.best_series = CheckpointSeries(os.path.join(self.directory, BEST_DIR), 1)

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
        except (tf.errors.OpError, ValueError, IndexError):
            return False

    @staticmethod
    def _damage(path: str) -> Optional[str]:
        """What is wrong with the files of checkpoint `path` (missing, truncated, a checksum that
        does not match), or None when every tensor reads back intact."""
        try:
            reader = tf.train.load_checkpoint(path)
            for key in reader.get_variable_to_shape_map():
                reader.get_tensor(key)
        except (tf.errors.OpError, ValueError, IndexError) as e:
            return _first_line(e)
        return None
