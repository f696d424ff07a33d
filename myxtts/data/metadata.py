"""LJSpeech-style metadata: finding the files, parsing rows, the seeded train/validation split.

A dataset folder holds `metadata.csv` (or `metadata_train.csv` + `metadata_eval.csv`) and `wavs/`.
Rows are `id|text|normalized_text[|speaker[|language]]` in UTF-8; 2-column rows (`id|text`) are
accepted and a header row (first field `id`, `file`, `audio`, ...) is skipped. The audio of row
`id` is `wavs/<id>.<ext>` in any format soundfile decodes (.wav, .flac, .ogg, .mp3, ...).
Parsing never raises for a bad row: it returns the rows and the problems (line numbers) so that
validation can report everything at once. This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.data")

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".opus", ".aiff", ".aif", ".au", ".caf",
                    ".w64", ".rf64")
HEADER_FIRST_FIELDS = {"id", "file", "filename", "file_name", "audio", "audio_file", "wav",
                       "path", "utt", "utterance"}
SPLIT_FILE = "data_split.json"
# Separators people use instead of '|', most telling first.
WRONG_SEPARATORS = (("\t", "tab"), (";", "semicolon"), (",", "comma"))


class DatasetError(MyXTTSError, ValueError):
    """A dataset that cannot be used; the message names the folder, file or line."""


@dataclasses.dataclass(frozen=True)
class Row:
    """One metadata row. `audio_path` is None when no wavs/<id>.<ext> exists."""

    id: str
    text: str
    speaker: str
    language: str
    audio_path: Optional[str]
    metadata_path: str
    line: int


@dataclasses.dataclass(frozen=True)
class ParseProblem:
    """A line that could not become a Row: `code` is non_utf8 | wrong_columns."""

    code: str
    metadata_path: str
    line: int
    detail: str


def find_metadata(directory: str, role: str) -> str:
    """The metadata file of `directory` for role 'train' or 'val' ('val' only for --val-data).

    train: metadata_train.csv, else metadata.csv.  val: metadata_eval.csv, metadata_val.csv,
    else metadata.csv. Missing or empty folders are errors naming the path.
    """
    flag = "--train-data" if role == "train" else "--val-data"
    if not directory:
        raise DatasetError(f"No dataset folder given: pass {flag} DIR, a folder with "
                           f"metadata.csv and wavs/.")
    if not os.path.isdir(directory):
        raise DatasetError(f"Dataset folder {directory} ({flag}) does not exist. Pass a folder "
                           f"that holds metadata.csv and wavs/ (LJSpeech layout).")
    if not os.listdir(directory):
        raise DatasetError(f"Dataset folder {directory} ({flag}) is empty. It should hold "
                           f"metadata.csv (id|text|normalized_text[|speaker[|language]]) and a "
                           f"wavs/ folder with the recordings.")
    names = (["metadata_train.csv", "metadata.csv"] if role == "train" else
             ["metadata_eval.csv", "metadata_val.csv", "metadata.csv"])
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise DatasetError(f"Dataset folder {directory} ({flag}) has no {' or '.join(names)}. "
                       f"Add a metadata file with rows id|text|normalized_text"
                       f"[|speaker[|language]] next to the wavs/ folder.")


def eval_metadata_beside(train_metadata: str) -> Optional[str]:
    """metadata_eval.csv next to a metadata_train.csv (the pre-split layout), else None."""
    if os.path.basename(train_metadata) != "metadata_train.csv":
        return None
    path = os.path.join(os.path.dirname(train_metadata), "metadata_eval.csv")
    return path if os.path.isfile(path) else None


def _audio_index(wav_dir: str) -> Dict[str, str]:
    """id → path for every decodable-looking file in wavs/ (preferring .wav, then .flac, ...)."""
    index: Dict[str, str] = {}
    if not os.path.isdir(wav_dir):
        return index
    rank = {ext: i for i, ext in enumerate(AUDIO_EXTENSIONS)}
    for name in sorted(os.listdir(wav_dir)):
        stem, ext = os.path.splitext(name)
        ext = ext.lower()
        if not ext or ext in (".txt", ".csv", ".json", ".lab"):
            continue
        current = index.get(stem)
        if current is None or rank.get(ext, 99) < rank.get(
                os.path.splitext(current)[1].lower(), 99):
            index[stem] = os.path.join(wav_dir, name)
    return index


def check_separator(path: str) -> None:
    """DatasetError when no line of metadata file `path` has a '|' but lines hold another
    common separator (a CSV saved with commas, tabs or semicolons)."""
    with open(path, "rb") as f:
        text = f.read().decode("utf-8", "replace")
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or any("|" in line for line in lines):
        return
    for char, name in WRONG_SEPARATORS:
        if sum(char in line for line in lines) * 2 > len(lines):
            raise DatasetError(
                f"{path}: no line contains '|'; the file looks {name}-separated. The separator "
                f"must be '|': id|text|normalized_text[|speaker[|language]] (LJSpeech layout), "
                f"e.g. LJ001-0001|Printing, in the only sense...|Printing, in the only "
                f"sense... Convert the file (texts may contain {name}s, so replace only the "
                f"separators) and run again.")


def read_metadata(path: str, default_speaker: str,
                  default_language: str) -> Tuple[List[Row], List[ParseProblem]]:
    """Parses a metadata file. Returns (rows, problems); never raises for a bad line, only when
    the whole file uses another separator than '|' (check_separator)."""
    check_separator(path)
    directory = os.path.dirname(os.path.abspath(path))
    audio = _audio_index(os.path.join(directory, "wavs"))
    rows: List[Row] = []
    problems: List[ParseProblem] = []
    with open(path, "rb") as f:
        raw_lines = f.read().split(b"\n")
    for number, raw in enumerate(raw_lines, start=1):
        raw = raw.rstrip(b"\r")
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(ParseProblem("non_utf8", path, number,
                                         f"byte {e.start}: {raw[max(0, e.start - 8):e.end + 8]!r}"))
            continue
        cols = line.split("|")
        if number == 1 and cols[0].strip().lower() in HEADER_FIRST_FIELDS and \
                cols[0].strip() not in audio:
            continue
        if not 2 <= len(cols) <= 5:
            detail = f"{len(cols)} columns (expected 2 to 5): {line[:60]!r}"
            if len(cols) == 1:
                separator = next((name for char, name in WRONG_SEPARATORS if char in line), None)
                if separator:
                    detail = (f"no '|' in the line, which looks {separator}-separated; the "
                              f"separator must be '|' (id|text|normalized_text): {line[:60]!r}")
            problems.append(ParseProblem("wrong_columns", path, number, detail))
            continue
        uid = cols[0].strip()
        text = cols[2].strip() if len(cols) >= 3 and cols[2].strip() else cols[1].strip()
        speaker = cols[3].strip() if len(cols) >= 4 and cols[3].strip() else default_speaker
        language = cols[4].strip() if len(cols) >= 5 and cols[4].strip() else default_language
        rows.append(Row(uid, text, speaker, language, audio.get(uid), path, number))
    return rows, problems


# ---- seeded, saved train/validation split ------------------------------------------------------

def _hash_fraction(seed: int, uid: str) -> float:
    digest = hashlib.sha256(f"{seed}:{uid}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2 ** 64


def split_rows(rows: Sequence[Row], val_fraction: float, seed: int,
               split_path: Optional[str]) -> Tuple[List[Row], List[Row]]:
    """Seeded train/validation split of one metadata file, saved to `split_path` and reused.

    First run: rows are ordered by a seeded hash of their id and the first
    round(n * val_fraction) (at least 1 when there are 2+ rows) go to validation. Later runs
    reuse the saved assignment; ids added since then go to validation when their seeded hash is
    below val_fraction, so earlier assignments never move.
    """
    if val_fraction <= 0 or len(rows) < 2:
        return list(rows), []
    saved = None
    if split_path and os.path.isfile(split_path):
        with open(split_path, encoding="utf-8") as f:
            saved = json.load(f)
        if saved.get("seed") != seed or saved.get("val_fraction") != val_fraction:
            logger.warning("%s was made with seed %s and val_fraction %s; the config now says "
                           "%s and %s, so the split is made again.", split_path,
                           saved.get("seed"), saved.get("val_fraction"), seed, val_fraction)
            saved = None
    if saved is None:
        ordered = sorted(rows, key=lambda r: _hash_fraction(seed, r.id))
        n_val = max(1, round(len(rows) * val_fraction))
        val_ids = {r.id for r in ordered[:n_val]}
        known = {r.id for r in rows}
    else:
        val_ids, known = set(saved["val_ids"]), set(saved["val_ids"]) | set(saved["train_ids"])
        new = [r for r in rows if r.id not in known]
        val_ids |= {r.id for r in new if _hash_fraction(seed, r.id) < val_fraction}
        if new:
            logger.info("%d row(s) added since %s was saved were assigned to the split.",
                        len(new), split_path)
        known |= {r.id for r in new}
    train = [r for r in rows if r.id not in val_ids]
    val = [r for r in rows if r.id in val_ids]
    if split_path and (saved is None or len(known) != len(saved["val_ids"]) +
                       len(saved["train_ids"])):
        os.makedirs(os.path.dirname(os.path.abspath(split_path)), exist_ok=True)
        tmp = f"{split_path}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"seed": seed, "val_fraction": val_fraction,
                       "val_ids": sorted(val_ids & known),
                       "train_ids": sorted(known - val_ids)}, f, ensure_ascii=False, indent=0)
        os.replace(tmp, split_path)
    return train, val
