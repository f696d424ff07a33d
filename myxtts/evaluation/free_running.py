"""Free-running evaluation of a trained model, the library behind `myxtts-evaluate`: which
held-out sentences (the run's validation split, or every row of a dataset the run did not train
on), each with a reference recording of its speaker that is another utterance; synthesising
them without teacher forcing; the per-utterance measures (length ratio, stop head, attention
focus/monotonicity/coverage, DTW mel-cepstral distortion to the own and the other sentences'
recordings, text match, word error rates), their means and the table. docs/evaluation.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from myxtts.atomic_write import atomic_write
from myxtts.config import XTTSConfig
from myxtts.data import metadata as metadata_lib
from myxtts.data.metadata import DatasetError, Row
from myxtts.evaluation import metrics
from myxtts.run_directory import SPLIT_FILE

if TYPE_CHECKING:  # both import TensorFlow, which waits until the arguments are checked
    from myxtts.data.validation import Item
    from myxtts.inference.synthesizer import Synthesizer

logger = logging.getLogger("myxtts")


# ---- which sentences -------------------------------------------------------------------------

@dataclasses.dataclass
class Sentences:
    """Held-out rows to evaluate, the rows references may come from, and where they came from."""

    held_out: List[Row]
    others: List[Row]
    data_dir: str
    source: str


def training_data_dir(info: dict) -> Optional[str]:
    train_metadata = info.get("dataset", {}).get("train_metadata")
    return os.path.dirname(train_metadata) if train_metadata else None


def _same_dir(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def find_sentences(config: XTTSConfig, checkpoint_dir: str, data: Optional[str],
                   info: dict) -> Sentences:
    """The run's validation rows when `data` is its training data (or unknown), else every row
    of `data`. Reads the saved split; never writes into the checkpoint directory."""
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
        metadata_path = metadata_lib.find_metadata(data_dir, "train")
    except DatasetError as e:
        if data:
            raise
        raise DatasetError(f"{e} (It is the run's training data, as "
                           f"{checkpoint_dir}/model_info.json records it.)") from None
    speaker = os.path.basename(os.path.normpath(data_dir)) or "speaker"
    rows, _ = metadata_lib.read_metadata(metadata_path, speaker, d.default_language)
    if trained_on is not None and not _same_dir(trained_on, data_dir):
        return Sentences(rows, [], data_dir,
                         f"every row of {metadata_path} (not this run's training data)")
    val_source = info.get("dataset", {}).get("val_source", "")
    val_metadata = (val_source if os.path.isfile(val_source)
                    else metadata_lib.eval_metadata_beside(metadata_path))
    if val_metadata:
        val_speaker = os.path.basename(os.path.dirname(os.path.abspath(val_metadata)))
        val_rows, _ = metadata_lib.read_metadata(val_metadata, val_speaker, d.default_language)
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


def pick_sentences(sentences: Sentences, config: XTTSConfig, tokenizer, num: int,
                   seed: int) -> Tuple[List[Pick], List[str]]:
    """Validated held-out items, `num` of them chosen with `seed`, each with a reference that is
    another utterance of its speaker. Returns (picks, ids of sentences whose speaker has no
    other usable utterance)."""
    # pylint: disable=import-outside-toplevel
    from myxtts.data.prepare import default_cache_dir
    from myxtts.data.validation import reference_pools, validate
    d = config.data
    # The other rows play the training split's part: references come from them and from the
    # other held-out rows of the speaker (validation.reference_pools), as in training.
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
    pools = reference_pools(items)["held_out"]
    rng = np.random.default_rng(seed)
    chosen = sorted(rng.choice(len(usable), size=min(num, len(usable)), replace=False))
    texts = {r.id: r.text for r in sentences.held_out}
    picks = []
    for index in chosen:
        item = usable[int(index)]
        candidates = pools[int(index)]
        picks.append(Pick(item, texts[item.id], candidates[int(rng.integers(len(candidates)))]))
    return picks, lonely


# ---- measuring ---------------------------------------------------------------------------------

def _wer_fields(recognizer, text: str, audio: Dict[str, np.ndarray], rate: int) -> dict:
    out = {}
    for name, samples in audio.items():
        if recognizer is None:
            out[f"wer_{name}"], out[f"heard_{name}"], out[f"word_errors_{name}"] = None, None, None
            continue
        heard = recognizer.transcribe(samples, rate)
        errors, count = metrics.word_errors(text, heard)
        out[f"wer_{name}"] = errors / count if count else None
        out[f"heard_{name}"], out[f"word_errors_{name}"] = heard, errors
    return out


WER_KINDS = ("synth", "gt_griffin_lim", "recording")


def evaluate(synth: "Synthesizer", picks: Sequence[Pick], recognizer) -> List[dict]:
    """Synthesises every pick free-running and measures it; returns one dict per utterance."""
    # pylint: disable=import-outside-toplevel
    from myxtts.data.cache import load_samples
    from myxtts.inference.synthesizer import TOKEN_PADDING
    d = synth.config.data
    # One padded token length for every sentence: one compiled decode serves them all (and
    # decoding texts of several padded lengths in one process trips a tf.while_loop shape
    # check in XTTSModel.decode).
    padded = max(len(p.item.tokens) for p in picks)
    padded = -(-padded // TOKEN_PADDING) * TOKEN_PADDING
    rows, synth_cepstra, gt_cepstra = [], [], []
    for number, pick in enumerate(picks, start=1):
        started = time.monotonic()
        item = pick.item
        samples = load_samples(item, d)
        gt_mel = synth.log_mel(samples[None])[0].numpy()
        # The reference's own samples: a piece of a longer recording (split_long) must not
        # hand over the start of its file, which may be the sentence itself.
        latents = synth.speaker_latents_from_mel(
            synth.reference_mel_of(load_samples(pick.reference, d)))
        result = synth.synthesize_detailed(list(item.tokens), item.language_id, latents,
                                           padded_length=padded)
        gt_wave, gt_wave_len = synth.vocoder(gt_mel[None], [gt_mel.shape[0]])
        row = {"id": item.id, "speaker": item.speaker, "text": pick.text,
               "reference_id": pick.reference.id, "reference_audio": pick.reference.audio_path,
               "tokens": len(item.tokens), "gt_frames": int(gt_mel.shape[0]),
               "synth_frames": int(result.mel.shape[0]), "max_frames": result.max_frames,
               "length_ratio": result.mel.shape[0] / gt_mel.shape[0],
               "ended_by_stop": bool(result.ended_by_stop),
               **metrics.alignment_measures(result.alignment)}
        row.update(_wer_fields(recognizer, pick.text, {
            "synth": result.waveform,
            "gt_griffin_lim": gt_wave[0, : int(gt_wave_len[0])].numpy(),
            "recording": samples}, d.sample_rate))
        row["seconds"] = round(time.monotonic() - started, 2)
        rows.append(row)
        synth_cepstra.append(metrics.mel_cepstra(result.mel))
        gt_cepstra.append(metrics.mel_cepstra(gt_mel))
        logger.info("%d/%d %s: %d frames (recording %d), %s, focus %.2f (%.1f s)", number,
                    len(picks), item.id, row["synth_frames"], row["gt_frames"],
                    "stop head" if row["ended_by_stop"] else "length cap", row["focus"],
                    row["seconds"])
    distances = metrics.dtw_mcd_matrix(synth_cepstra, gt_cepstra)
    matched = metrics.text_match(distances) if len(rows) > 1 else [None]
    for i, row in enumerate(rows):
        row["mcd_own"] = float(distances[i, i])
        row["mcd_others"] = (float(np.mean(np.delete(distances[i], i))) if len(rows) > 1
                             else None)
        row["text_match"] = None if matched[i] is None else bool(matched[i])
    return rows


def summarize(rows: Sequence[dict]) -> dict:
    """Means over utterances; WER as total word errors / total reference words."""
    def mean(key):
        values = [r[key] for r in rows if r[key] is not None]
        return float(np.mean(values)) if values else None

    summary = {key: mean(key) for key in ("length_ratio", "focus", "monotonicity", "coverage",
                                           "mcd_own", "mcd_others")}
    summary["ended_by_stop"] = float(np.mean([r["ended_by_stop"] for r in rows]))
    summary["text_match"] = mean("text_match")
    summary["text_match_chance"] = 1.0 / len(rows) if len(rows) > 1 else None
    words = sum(len(metrics.words(r["text"])) for r in rows)
    for kind in WER_KINDS:
        errors = [r[f"word_errors_{kind}"] for r in rows]
        summary[f"wer_{kind}"] = (None if None in errors or not words
                                  else sum(errors) / words)
    return summary


COLUMNS = (("id", "id", None), ("ratio", "length_ratio", "{:.2f}"),
           ("stop", "ended_by_stop", None), ("focus", "focus", "{:.2f}"),
           ("mono", "monotonicity", "{:.2f}"), ("cover", "coverage", "{:.2f}"),
           ("mcd_own", "mcd_own", "{:.2f}"), ("mcd_oth", "mcd_others", "{:.2f}"),
           ("match", "text_match", None), ("wer_syn", "wer_synth", "{:.2f}"),
           ("wer_gl", "wer_gt_griffin_lim", "{:.2f}"), ("wer_rec", "wer_recording", "{:.2f}"))


def _cell(value, fmt) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt.format(value) if fmt else str(value)


def format_table(rows: Sequence[dict], summary: dict) -> str:
    """Per-utterance rows and a mean row (stop and match as shares there)."""
    mean_row = {**summary, "id": "mean"}
    lines = [[_cell(r[key], fmt) for _, key, fmt in COLUMNS] for r in rows]
    lines.append([_cell(mean_row[key], fmt or "{:.2f}") for _, key, fmt in COLUMNS])
    header = [name for name, _, _ in COLUMNS]
    widths = [max(len(x) for x in column) for column in zip(header, *lines)]
    out = [" ".join(h.ljust(w) if i == 0 else h.rjust(w)
                    for i, (h, w) in enumerate(zip(cells, widths)))
           for cells in [header, *lines]]
    out.insert(-1, "-" * len(out[0]))
    return "\n".join(out)


def write_json(path: str, report: dict) -> None:
    atomic_write(path, json.dumps(report, indent=2, ensure_ascii=False))
