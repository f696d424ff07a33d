"""From dataset folders to validated items: metadata → split → validation → tokenizer → stats.

`prepare_dataset` is what both `--validate-only` and `InputPipeline` run before any batch exists.
With a `work_dir` (the checkpoint directory) it reuses a saved `vocab.json` and the saved split,
and writes the dataset statistics to `model_info.json`; a warm start's source vocabulary is
extended, never changed (existing ids stay).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Dict, List, Optional

from myxtts.data import corpora
from myxtts.data import metadata as metadata_lib
from myxtts.data import saved_validation, transcript_check, validation
from myxtts.data.metadata import ParseProblem
from myxtts.data.text import TextError, Tokenizer
from myxtts.data.validation import Item, ValidationReport
from myxtts.model_info import update_model_info
from myxtts.run_directory import SPLIT_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts.data")



@dataclasses.dataclass
class PreparedDataset:
    """Validated items per split ("train", "val"), the report and the tokenizer."""

    items: Dict[str, List[Item]]
    report: ValidationReport
    tokenizer: Tokenizer
    train_metadata: str
    val_source: str  # where validation rows came from, for logs and model_info.json
    cache_dir: str

    def dataset_info(self) -> dict:
        """The `dataset` entry of model_info.json."""
        return {"train_metadata": os.path.abspath(self.train_metadata),
                "val_source": self.val_source, **self.report.to_dict()}


def default_cache_dir(data_config, train_dir: str) -> str:
    return data_config.cache_dir or os.path.join(train_dir, ".myxtts_cache")


def _load_vocabulary(path: str, data_config) -> Tokenizer:
    d = data_config
    tokenizer = Tokenizer.load(path)
    if (tokenizer.cleaner, tokenizer.use_phonemes) != (d.text_cleaners, d.use_phonemes):
        raise TextError(
            f"{path} was made with text_cleaners={tokenizer.cleaner!r}, use_phonemes="
            f"{tokenizer.use_phonemes}, but the config says {d.text_cleaners!r}, "
            f"{d.use_phonemes}. Token ids would change under the saved model: use the "
            f"original text settings, or a new checkpoint directory.")
    logger.info("Using the saved vocabulary %s (%d symbols).", path, tokenizer.vocab_size)
    return tokenizer


def prepare_dataset(config, train_dir: str, val_dir: Optional[str] = None,
                    work_dir: Optional[str] = None,
                    base_vocabulary: Optional[str] = None) -> PreparedDataset:
    """Reads, splits and validates the dataset(s); raises DatasetError (missing folders, policy
    'fail', too few usable rows) with the summary table in the message.

    `base_vocabulary` (a warm start's source vocab.json) is extended by the characters of the
    training texts it lacks, unless `work_dir` already holds the run's own vocab.json."""
    d = config.data
    train_metadata = corpora.find_source(train_dir, "train", d.format)
    cache_dir = default_cache_dir(d, train_dir)
    eval_beside = metadata_lib.eval_metadata_beside(train_metadata)
    val_metadata = corpora.find_source(val_dir, "val", d.format) if val_dir else eval_beside
    split_path = None if val_metadata else os.path.join(work_dir or cache_dir, SPLIT_FILE)

    tokenizer = None
    vocab_path = os.path.join(work_dir, VOCAB_FILE) if work_dir else None
    extend = not (vocab_path and os.path.isfile(vocab_path)) and base_vocabulary is not None
    if extend or (vocab_path and os.path.isfile(vocab_path)):
        tokenizer = _load_vocabulary(base_vocabulary if extend else vocab_path, d)

    def saved_key():
        return saved_validation.key(d, [train_metadata, val_metadata, d.exclude_rows or None],
                                    [train_dir, val_dir],
                                    base_vocabulary if extend else None, extend)

    split_existed = bool(split_path) and os.path.isfile(split_path)
    saved = saved_validation.load(cache_dir, saved_key(), None if extend else tokenizer,
                                  split_path)
    if saved:
        report, items, tokenizer, _ = saved
        logger.info("Validation: the result of the last check of these rows is still valid "
                    "(every audio file unchanged): reusing %s.",
                    os.path.join(cache_dir, saved_validation.FILE))
    else:
        report, items, tokenizer, audio_paths = _validate(
            d, train_dir, train_metadata, val_dir, val_metadata, split_path, cache_dir,
            tokenizer, extend, base_vocabulary)
        saved_validation.save(cache_dir, saved_key(), report, items, tokenizer, audio_paths,
                              {"tokenizer_given": vocab_path is not None
                               and os.path.isfile(vocab_path) and not extend},
                              split_path, not split_existed)
    val_source = (os.path.abspath(val_metadata) if val_metadata else
                  f"seeded split ({d.val_fraction:g} of {train_metadata}, seed {d.seed}), "
                  f"saved in {split_path}")
    prepared = PreparedDataset(items, report, tokenizer, train_metadata, val_source, cache_dir)
    if work_dir:
        update_model_info(work_dir, dataset=prepared.dataset_info())
    validation.enforce(report, items, d)
    return prepared


def _validate(d, train_dir, train_metadata, val_dir, val_metadata, split_path, cache_dir,
              tokenizer, extend, base_vocabulary):
    """Reads, splits and checks the rows: (report, items, tokenizer, every row's audio
    path)."""
    default_speaker = os.path.basename(os.path.normpath(train_dir)) or "speaker"
    train_rows, train_problems = corpora.read_source(train_metadata, default_speaker,
                                                     d.default_language, d.vctk_mic)
    if val_metadata:
        val_speaker = (os.path.basename(os.path.normpath(val_dir)) if val_dir
                       else default_speaker)
        val_rows, val_problems = corpora.read_source(val_metadata, val_speaker,
                                                     d.default_language, d.vctk_mic)
    else:
        train_rows, val_rows = metadata_lib.split_rows(train_rows, d.val_fraction, d.seed,
                                                       split_path)
        val_problems = []
    if d.exclude_rows:
        listed = transcript_check.read_ids(d.exclude_rows)
        for rows, problems in ((train_rows, train_problems), (val_rows, val_problems)):
            problems += [ParseProblem("excluded", r.metadata_path, r.line,
                                      f"{r.id} (in {d.exclude_rows})")
                         for r in rows if r.id in listed]
            rows[:] = [r for r in rows if r.id not in listed]
    report, items, extended = validation.validate(
        {"train": train_rows, "val": val_rows}, {"train": train_problems, "val": val_problems},
        d, os.path.join(cache_dir, "validation_cache.json"), tokenizer, extend_tokenizer=extend)
    if extend:
        added = extended.symbols[tokenizer.vocab_size:]
        logger.info("Vocabulary: the %d symbols of %s keep their ids; %s.", tokenizer.vocab_size,
                    base_vocabulary, f"added {len(added)} the source never saw: "
                    + " ".join(repr(c) for c in added) if added else "no new characters")
    audio_paths = [r.audio_path for rows in (train_rows, val_rows) for r in rows if r.audio_path]
    return report, items, extended, audio_paths
