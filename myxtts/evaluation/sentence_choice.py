"""Which sentences `myxtts-evaluate` synthesises, and with which speaker references
(docs/evaluation.md, "Which sentences, which references").

In-set: the run's validation rows (or a folder whose speakers the run trained on), each with a
reference that is another utterance of its speaker. Zero-shot: a folder whose speakers the run
never trained on; one 3-8 s reference per speaker, the texts from that speaker's other rows.
Sentences are spread evenly over the speakers, and each also gets a reference of another
evaluated speaker (the "cross" reference: the same text in another voice).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from myxtts.config import XTTSConfig
from myxtts.data import corpora
from myxtts.data import metadata as metadata_lib
from myxtts.data.metadata import DatasetError, Row
from myxtts.run_directory import SPLIT_FILE

if TYPE_CHECKING:  # imports TensorFlow, which waits until the arguments are checked
    from myxtts.data.validation import Item

logger = logging.getLogger("myxtts")

IN_SET, ZERO_SHOT = "in-set", "zero-shot"
# How long the one reference of a zero-shot speaker is (seconds, after the data pipeline's
# trimming): the length a user would record for a new voice.
ZERO_SHOT_REFERENCE_SECONDS = (3.0, 8.0)


@dataclasses.dataclass
class Sentences:
    """Held-out rows to evaluate, the rows references may come from, and where they came from.
    mode: IN_SET (speakers the run trained on) or ZERO_SHOT (speakers it never heard)."""

    held_out: List[Row]
    others: List[Row]
    data_dir: str
    source: str
    mode: str = IN_SET


def training_data_dir(info: dict) -> Optional[str]:
    train_metadata = info.get("dataset", {}).get("train_metadata")
    return corpora.dataset_folder(train_metadata) if train_metadata else None


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _read_rows(data_dir: str, d) -> Tuple[str, List[Row]]:
    metadata_path = corpora.find_source(data_dir, "train", d.format)
    speaker = os.path.basename(os.path.normpath(data_dir)) or "speaker"
    return metadata_path, corpora.read_source(metadata_path, speaker, d.default_language,
                                              d.vctk_mic)[0]


def _training_speakers(trained_on: str, d) -> Optional[Set[str]]:
    """The speakers of the run's training metadata; None when it cannot be read any more."""
    try:
        return {r.speaker for r in _read_rows(trained_on, d)[1]}
    except DatasetError:
        return None


def find_sentences(config: XTTSConfig, checkpoint_dir: str, data: Optional[str],
                   info: dict) -> Sentences:
    """The run's validation rows when `data` is its training data (or unknown), else every row
    of `data`: zero-shot when none of its speakers is a training speaker. Reads the saved split;
    never writes into the checkpoint directory."""
    d = config.data
    trained_on = training_data_dir(info)
    data_dir = data or trained_on
    if data_dir is None:
        raise DatasetError(
            f"{checkpoint_dir}/model_info.json does not record the training data, so the "
            f"held-out sentences must come from a named dataset folder (metadata.csv + wavs/): "
            f"the one the run trained on (its validation split is evaluated) or a held-out "
            f"one.")
    try:
        metadata_path, rows = _read_rows(data_dir, d)
    except DatasetError as e:
        if data:
            raise
        raise DatasetError(f"{e} (It is the run's training data, as "
                           f"{checkpoint_dir}/model_info.json records it.)") from None
    if trained_on is not None and not _same_dir(trained_on, data_dir):
        trained = _training_speakers(trained_on, d)
        known = sorted({r.speaker for r in rows} & trained) if trained is not None else []
        if trained is None:
            logger.warning("The run's training data %s cannot be read: the speakers of %s are "
                           "taken to be new to the model (zero-shot).", trained_on, data_dir)
        elif known:
            logger.info("Speaker(s) %s of %s are training speakers: judged in-set.",
                        ", ".join(known), data_dir)
        return Sentences(rows, [], data_dir,
                         f"every row of {metadata_path} (not this run's training data)",
                         IN_SET if known else ZERO_SHOT)
    val_source = info.get("dataset", {}).get("val_source", "")
    val_metadata = (val_source if val_source and os.path.exists(val_source)
                    else metadata_lib.eval_metadata_beside(metadata_path))
    if val_metadata:
        val_speaker = os.path.basename(corpora.dataset_folder(val_metadata))
        val_rows, _ = corpora.read_source(val_metadata, val_speaker, d.default_language,
                                          d.vctk_mic)
        return Sentences(val_rows, rows, data_dir, f"the run's validation rows {val_metadata}")
    split_path = os.path.join(checkpoint_dir, SPLIT_FILE)
    if os.path.isfile(split_path):
        with open(split_path, encoding="utf-8") as f:
            val_ids = set(json.load(f)["val_ids"])
        source = f"the run's validation split {split_path}"
    else:
        _, val_rows = metadata_lib.split_rows(rows, d.val_fraction, d.seed, None)
        val_ids = {r.id for r in val_rows}
        source = (f"the seeded validation split of {metadata_path} (val_fraction "
                  f"{d.val_fraction:g}, seed {d.seed}; no {SPLIT_FILE} saved)")
    return Sentences([r for r in rows if r.id in val_ids],
                     [r for r in rows if r.id not in val_ids], data_dir, source)


@dataclasses.dataclass(frozen=True)
class Pick:
    item: "Item"
    text: str  # the metadata text (what the recogniser should hear)
    reference: "Item"  # another utterance of the same speaker
    # A reference of another evaluated speaker, for the same text in that voice (None with one
    # evaluated speaker).
    cross_reference: Optional["Item"] = None


def spread_over_speakers(speakers: Sequence[str], num: int,
                         rng: np.random.Generator) -> List[int]:
    """Indices of `num` items (all if fewer), taken in turn from each speaker (in name order) in
    a seeded order within each speaker, so every speaker gets num // speakers or one more (the
    first by name) until it runs out. Returned in index order."""
    queues = {s: [int(i) for i in rng.permutation(
        [i for i, other in enumerate(speakers) if other == s])] for s in sorted(set(speakers))}
    chosen: List[int] = []
    while len(chosen) < min(num, len(speakers)):
        for queue in queues.values():
            if queue and len(chosen) < num:
                chosen.append(queue.pop(0))
    return sorted(chosen)


def _zero_shot_references(usable: Sequence["Item"], sample_rate: int,
                          rng: np.random.Generator) -> Dict[str, int]:
    """For each speaker, the index of its one reference: a seeded choice among its
    ZERO_SHOT_REFERENCE_SECONDS-long items, else (logged) the item nearest that range."""
    low, high = ZERO_SHOT_REFERENCE_SECONDS
    by_speaker: Dict[str, List[int]] = collections.defaultdict(list)
    for i, item in enumerate(usable):
        by_speaker[item.speaker].append(i)
    chosen = {}
    for speaker in sorted(by_speaker):
        seconds = {i: usable[i].num_samples / sample_rate for i in by_speaker[speaker]}
        fitting = [i for i, s in seconds.items() if low <= s <= high]
        if fitting:
            chosen[speaker] = fitting[int(rng.integers(len(fitting)))]
            continue
        chosen[speaker] = min(seconds, key=lambda i: max(low - seconds[i], seconds[i] - high))
        logger.warning("Speaker %r has no %g-%g s recording for its zero-shot reference; using "
                       "the nearest, %s (%.1f s).", speaker, low, high,
                       usable[chosen[speaker]].id, seconds[chosen[speaker]])
    return chosen


def _with_cross_references(picks: List[Pick], rng: np.random.Generator) -> List[Pick]:
    """Each pick gets a reference of another evaluated speaker: the other speakers in turn (name
    order), and a seeded one of the references that speaker's own picks use."""
    references: Dict[str, Dict[Tuple[str, int], "Item"]] = collections.defaultdict(dict)
    for pick in picks:
        references[pick.item.speaker][pick.reference.clip] = pick.reference
    speakers = sorted(references)
    if len(speakers) < 2:
        return picks
    turns: Dict[str, int] = collections.Counter()
    crossed = []
    for pick in picks:
        others = [s for s in speakers if s != pick.item.speaker]
        other = others[turns[pick.item.speaker] % len(others)]
        turns[pick.item.speaker] += 1
        candidates = list(references[other].values())
        crossed.append(dataclasses.replace(
            pick, cross_reference=candidates[int(rng.integers(len(candidates)))]))
    return crossed


def pick_sentences(sentences: Sentences, config: XTTSConfig, tokenizer, num: int,
                   seed: int) -> Tuple[List[Pick], List[str]]:
    """Validated held-out items, `num` of them chosen with `seed` and spread evenly over the
    speakers, each with a reference of its speaker that is another utterance (zero-shot: the
    speaker's one reference, whose own row is not a sentence) and a cross reference. Returns
    (picks, ids of sentences whose speaker has no other usable utterance)."""
    # pylint: disable=import-outside-toplevel
    from myxtts.data.prepare import default_cache_dir
    from myxtts.data.validation import ReferencePools, validate
    d = config.data
    # The other rows play the training split's part: references come from them and from the
    # other held-out rows of the speaker (validation.ReferencePools), as in training.
    report, items, _ = validate({"train": sentences.others, "held_out": sentences.held_out}, {},
                                d, os.path.join(default_cache_dir(d, sentences.data_dir),
                                                "validation_cache.json"), tokenizer)
    lonely = [row.id for row in sentences.held_out
              if any(p.code == "no_reference" and p.split == "held_out"
                     and p.where.endswith(f"(id {row.id})") for p in report.problems)]
    skipped = len(sentences.held_out) - len(items["held_out"]) - len(lonely)
    if skipped:
        logger.info("%d held-out row(s) left out by the dataset checks (as in training).",
                    skipped)
    usable = items["held_out"]
    if not usable:
        raise DatasetError(
            f"No usable held-out sentence in {sentences.source} ({len(sentences.held_out)} "
            f"row(s) before the dataset checks, {len(lonely)} of them without another "
            f"utterance of their speaker to use as the reference). Evaluate a dataset folder "
            f"the run did not train on instead, one holding at least two recordings per "
            f"speaker.")
    rng = np.random.default_rng(seed)
    texts = {r.id: r.text for r in sentences.held_out}
    if sentences.mode == ZERO_SHOT:
        fixed = _zero_shot_references(usable, d.sample_rate, rng)
        references = set(fixed.values())
        candidates = [i for i in range(len(usable)) if i not in references]
        chosen = [candidates[i] for i in spread_over_speakers(
            [usable[i].speaker for i in candidates], num, rng)]
        picks = [Pick(usable[i], texts[usable[i].id], usable[fixed[usable[i].speaker]])
                 for i in chosen]
    else:
        pools = ReferencePools(items)
        picks = []
        for i in spread_over_speakers([item.speaker for item in usable], num, rng):
            pool = pools.pool("held_out", i)
            picks.append(Pick(usable[i], texts[usable[i].id],
                              pool[int(rng.integers(len(pool)))]))
    return _with_cross_references(picks, rng), lonely
