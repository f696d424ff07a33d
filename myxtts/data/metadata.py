"""LJSpeech-style metadata: finding the files, parsing rows, the seeded train/validation split.

A dataset folder holds `metadata.csv` (or `metadata_train.csv` + `metadata_eval.csv`) and the
audio, in `wavs/` or beside the metadata file. Rows are `id|text|normalized_text[|speaker[|
language]]` in UTF-8; 2-column rows (`id|text`) are accepted and a header row (first field `id`,
`file`, `audio`, ...) is skipped. The audio of row `id` is `wavs/<id>.<ext>` or `<id>.<ext>` (the
id may also carry the extension or a relative path: `clip1.wav`, `wavs/clip1.wav`): any format
libsndfile decodes, and with ffmpeg installed also m4a/aac/mp4/webm (myxtts.data.audio).
Parsing never raises for a bad row: it returns the rows and the problems (line numbers) so that
validation can report everything at once. This module does not import TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import hashlib
import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Tuple

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.data")

# Decoded by libsndfile (soundfile), in order of preference when one id has several files.
SOUNDFILE_EXTENSIONS = (".wav", ".wave", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".aiff",
                        ".aif", ".aifc", ".au", ".snd", ".caf", ".w64", ".rf64")
# Decoded by the ffmpeg program when it is installed.
FFMPEG_EXTENSIONS = (".m4a", ".m4b", ".aac", ".mp4", ".webm", ".mka", ".wma", ".ac3")
AUDIO_EXTENSIONS = SOUNDFILE_EXTENSIONS + FFMPEG_EXTENSIONS
HEADER_FIRST_FIELDS = {"id", "file", "filename", "file_name", "audio", "audio_file", "wav",
                       "path", "utt", "utterance"}
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


def _nearest(directory: str) -> str:
    """' Did you mean X?' for the existing folder beside `directory` whose name is nearest
    its own (a typo), else ''."""
    parent, name = os.path.split(os.path.normpath(directory))
    try:
        folders = [entry for entry in os.listdir(parent or ".")
                   if os.path.isdir(os.path.join(parent or ".", entry))]
    except OSError:
        return ""
    close = difflib.get_close_matches(name, folders, n=1, cutoff=0.6)
    return f" Did you mean {os.path.join(parent, close[0])}?" if close else ""


def find_metadata(directory: str, role: str) -> str:
    """The metadata file of dataset folder `directory` for role 'train' or 'val'.

    train: metadata_train.csv, else metadata.csv.  val: metadata_eval.csv, metadata_val.csv,
    else metadata.csv. Missing or empty folders are errors naming the path (a command adds
    which of its flags named it).
    """
    if not directory:
        raise DatasetError("No dataset folder given: a dataset is a folder with metadata.csv and "
                           "wavs/.")
    if not os.path.isdir(directory):
        raise DatasetError(f"The dataset folder {directory} does not exist.{_nearest(directory)} "
                           f"A dataset is a folder that holds metadata.csv and wavs/ (LJSpeech "
                           f"layout).")
    if not os.listdir(directory):
        raise DatasetError(f"The dataset folder {directory} is empty. It should hold metadata.csv "
                           f"(id|text|normalized_text[|speaker[|language]]) and a wavs/ folder "
                           f"with the recordings, or a LibriTTS, VCTK or Common Voice corpus as "
                           f"it comes (docs/data.md, 'Corpus layouts').")
    names = (["metadata_train.csv", "metadata.csv"] if role == "train" else
             ["metadata_eval.csv", "metadata_val.csv", "metadata.csv"])
    for name in names:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    audio = sorted(set(_audio_index(directory).values()))
    if audio:
        example = os.path.splitext(os.path.basename(audio[0]))[0]
        raise DatasetError(
            f"The dataset folder {directory} holds {len(audio)} audio file(s) but no "
            f"{' or '.join(names)}, which says what is spoken in each. Write "
            f"{os.path.join(directory, 'metadata.csv')}: UTF-8, one line per recording, "
            f"<file name without extension>|<the words exactly as spoken>, e.g. "
            f"'{example}|Hello, this is my voice.' (optional further columns: "
            f"|normalized_text|speaker|language). `ls` gives the names; a speech recogniser "
            f"(e.g. Whisper) can draft the texts, which you then correct by listening.")
    raise DatasetError(f"The dataset folder {directory} has no {' or '.join(names)} and no "
                       f"audio. Add the recordings (in wavs/ or next to the metadata file) and a "
                       f"metadata file with rows id|text|normalized_text[|speaker[|language]]. "
                       f"myxtts also reads LibriTTS, VCTK and Common Voice folders as they come "
                       f"(docs/data.md, 'Corpus layouts'); none of those was found either.")


def eval_metadata_beside(train_metadata: str) -> Optional[str]:
    """metadata_eval.csv next to a metadata_train.csv (the pre-split layout), else None."""
    if os.path.basename(train_metadata) != "metadata_train.csv":
        return None
    path = os.path.join(os.path.dirname(train_metadata), "metadata_eval.csv")
    return path if os.path.isfile(path) else None


def _audio_index(directory: str) -> Dict[str, str]:
    """id → path of the audio files in directory/wavs/ and in directory itself (wavs/ first;
    .wav before .flac, ...), under their stem and under their file name."""
    index: Dict[str, str] = {}
    rank = {ext: i for i, ext in enumerate(AUDIO_EXTENSIONS)}
    for folder in (os.path.join(directory, "wavs"), directory):
        found: Dict[str, str] = {}
        with os.scandir(folder) if os.path.isdir(folder) else contextlib.nullcontext(()) as it:
            entries = sorted((e.name, e.path) for e in it
                             if os.path.splitext(e.name)[1].lower() in rank and e.is_file())
        for name, path in entries:
            stem, ext = os.path.splitext(name)
            current = found.get(stem)
            if current is None or rank[ext.lower()] < rank[os.path.splitext(current)[1].lower()]:
                found[stem] = path
            found[name] = path
        for key, path in found.items():
            index.setdefault(key, path)
    return index


def _row_audio(directory: str, audio: Dict[str, str], uid: str) -> Optional[str]:
    """The audio file of row `uid`: by stem or file name, or a path relative to the metadata."""
    if uid in audio:
        return audio[uid]
    path = os.path.join(directory, uid)
    if os.path.splitext(uid)[1].lower() in AUDIO_EXTENSIONS and os.path.isfile(path):
        return path
    return None


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
    audio = _audio_index(directory)
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
        rows.append(Row(uid, text, speaker, language, _row_audio(directory, audio, uid), path,
                        number))
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
        atomic_write(split_path, json.dumps({"seed": seed, "val_fraction": val_fraction,
                                             "val_ids": sorted(val_ids & known),
                                             "train_ids": sorted(known - val_ids)},
                                            ensure_ascii=False, indent=0))
    return train, val
