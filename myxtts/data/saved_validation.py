"""A whole validation's result, kept for the next start: a million rows come back in seconds
instead of being parsed, cleaned, tokenized and counted again.

`<cache_dir>/validated.json` holds the usable items of each split (as columns), the report, the
tokenizer and the stamp (size, mtime) of every row's audio file, under a key (SHA-256) of what
the result depends on: the data settings validation reads (SETTINGS), the metadata files' bytes, the dataset folders' mtimes
(adding or removing a file changes them), the vocabulary a warm start extends, and the source of
the modules that read, clean and check rows. A run's own saved vocabulary must equal the
result's tokenizer, and its saved train/validation split the result's (a run without a split
file yet takes a result whose split was made from scratch, and gets its file). The result is
used when the key matches and every audio file still has its stamp (one `stat` each); otherwise
validation runs as usual (its per-file audio facts are cached on their own) and the result is
saved again. This module does not import TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

from myxtts.atomic_write import atomic_write
from myxtts.data import corpora, metadata, splitting, text, validation
from myxtts.data.text import Tokenizer
from myxtts.data.validation import Item, Problem, ValidationReport

logger = logging.getLogger("myxtts.data")

FILE = "validated.json"
VERSION = 1
# The modules whose code decides what validation makes of a row, and the data settings it reads
# (the rest shape features and batches, which validation does not look at).
_SOURCES = (corpora, metadata, splitting, text, validation)
SETTINGS = ("format", "vctk_mic", "sample_rate", "trim_silence", "trim_top_db", "min_audio_seconds",
            "max_audio_seconds", "split_long_utterances", "text_cleaners", "use_phonemes",
            "languages", "default_language", "max_text_length", "seed", "val_fraction")


def _folder_mtimes(folder: Optional[str]) -> List[int]:
    if not folder:
        return []
    return [os.stat(p).st_mtime_ns if os.path.isdir(p) else -1
            for p in (folder, os.path.join(folder, "wavs"))]


def key(data_config, metadata_files: Sequence[Optional[str]], folders: Sequence[Optional[str]],
        vocabulary: Optional[str], extend: bool) -> str:
    """The key of a validation's inputs (see the module docstring); `vocabulary` is the source
    vocabulary a warm start extends (the run's own saved vocabulary is compared by `load`)."""
    h = hashlib.sha256()
    h.update(json.dumps({
        "version": VERSION, "data": {k: getattr(data_config, k) for k in SETTINGS},
        "metadata": [(os.path.abspath(p) if p else None, corpora.source_digest(p))
                     for p in metadata_files],
        "folders": [(os.path.abspath(f) if f else None, _folder_mtimes(f)) for f in folders],
        "vocabulary": corpora.source_digest(vocabulary),
        "extend": extend,
        "sources": [corpora.source_digest(module.__file__) for module in _SOURCES]},
        sort_keys=True, default=str).encode())
    return h.hexdigest()


def _stamps(paths: Sequence[str]) -> List[List[int]]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([-1, -1])
    return out


def save(cache_dir: str, digest: str, report: ValidationReport, items: Dict[str, List[Item]],
         tokenizer: Tokenizer, audio_paths: Sequence[str], extra: dict,
         split_file: Optional[str], split_was_made: bool) -> None:
    """Writes the result (atomically); a failure to write only costs the next start time.
    `split_file` is the seeded split's file (None when the validation rows come from their own
    metadata), `split_was_made` whether this validation made it from scratch."""
    columns = {}
    for split, split_items in items.items():
        columns[split] = {
            "id": [it.id for it in split_items], "audio_path": [it.audio_path for it in split_items],
            "text": [it.text for it in split_items],
            "tokens": [t for it in split_items for t in it.tokens],
            "token_lengths": [len(it.tokens) for it in split_items],
            "speaker": [it.speaker for it in split_items],
            "language_id": [it.language_id for it in split_items],
            "num_samples": [it.num_samples for it in split_items],
            "source_rate": [it.source_rate for it in split_items],
            "offset": [it.offset for it in split_items]}
    problems = report.problems
    paths = sorted(set(audio_paths))
    try:
        atomic_write(os.path.join(cache_dir, FILE), json.dumps({
            "key": digest, "audio_paths": paths, "stamps": _stamps(paths), "items": columns,
            "rows_read": report.rows_read, "stats": report.stats,
            "problems": [[p.code for p in problems], [p.split for p in problems],
                         [p.where for p in problems], [p.detail for p in problems]],
            "tokenizer": tokenizer.to_json(), "extra": extra,
            "split": _split_record(split_file, split_was_made)}, ensure_ascii=False))
    except OSError as e:
        logger.warning("Could not save the validation result in %s (%s); the next start "
                       "validates again.", cache_dir, e)


def _split_record(split_file: Optional[str], made: bool) -> Optional[dict]:
    if not split_file or not os.path.isfile(split_file):
        return None
    with open(split_file, encoding="utf-8") as f:
        content = f.read()
    return {"digest": corpora.source_digest(split_file), "made": made, "content": content}


def _split_fits(record: Optional[dict], split_file: Optional[str]) -> bool:
    """Whether the saved result's split is the one this start uses: the same file, or, when
    the file is not there yet, a split made from scratch (the same seeded split this start
    would make from the same rows; the file is then written, as making it would have)."""
    if not split_file:
        return record is None
    if record is None:
        return False
    if os.path.isfile(split_file):
        return corpora.source_digest(split_file) == record["digest"]
    if not record["made"]:
        return False
    atomic_write(split_file, record["content"])
    return True


def load(cache_dir: str, digest: str, given: Optional[Tokenizer], split_file: Optional[str]
         ) -> Optional[Tuple[ValidationReport, Dict[str, List[Item]], Tokenizer, dict]]:
    """(report, items, tokenizer, extra) of the saved result when its key is `digest`, every
    audio file is unchanged and the tokenizer fits: the run's saved vocabulary `given` equals the
    result's tokenizer (a result made by building the tokenizer from these rows is the same one
    as made with it), or, with none given, the result's tokenizer was built from the rows."""
    path = os.path.join(cache_dir, FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        if saved.get("key") != digest:
            return None
        tok = saved["tokenizer"]
        tokenizer = Tokenizer(tok["symbols"][1:], tok["cleaner"], tok["use_phonemes"])
        if (tokenizer != given) if given is not None else saved["extra"]["tokenizer_given"]:
            return None
        if not _split_fits(saved["split"], split_file):
            return None
        changed = sum(a != b for a, b in zip(_stamps(saved["audio_paths"]), saved["stamps"]))
        if changed:
            logger.info("%d audio file(s) changed since the last validation: validating again.",
                        changed)
            return None
        items = {split: _items(columns) for split, columns in saved["items"].items()}
        p = saved["problems"]
        report = ValidationReport(saved["rows_read"],
                                  [Problem(*fields) for fields in zip(*p)] if p[0] else [],
                                  saved["stats"])
        return report, items, tokenizer, saved["extra"]
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        logger.warning("Ignoring the unreadable validation result %s (%s).", path, e)
        return None


def _items(columns: dict) -> List[Item]:
    tokens, items, start = columns["tokens"], [], 0
    for i, length in enumerate(columns["token_lengths"]):
        items.append(Item(columns["id"][i], columns["audio_path"][i], columns["text"][i],
                          tuple(tokens[start:start + length]), columns["speaker"][i],
                          columns["language_id"][i], columns["num_samples"][i],
                          columns["source_rate"][i], columns["offset"][i]))
        start += length
    return items
