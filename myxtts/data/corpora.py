"""The corpora people have, read as they come: LJSpeech, LibriTTS (and LibriTTS-R), VCTK and
Common Voice folders become the same rows (`metadata.Row`) and parse problems, so validation,
the saved validation, the feature cache and the speaker-aware references work unchanged.

A *source* is what a dataset flag names, resolved by `find_source`:

    ljspeech     DIR/metadata.csv (metadata_train.csv, ...; myxtts.data.metadata)
    libritts     DIR = one subset (train-clean-100, dev-clean, ...): SPEAKER/CHAPTER/ with
                 SPEAKER_CHAPTER.trans.tsv (id, original text, normalized text) or, without it,
                 <id>.normalized.txt beside each <id>.wav; text = the normalized text,
                 speaker = SPEAKER
    vctk         DIR holding txt/pNNN/<id>.txt and wav48_silence_trimmed/pNNN/<id>_mic1.flac
                 (VCTK 0.92; data.vctk_mic picks mic2) or wav48/pNNN/<id>.wav (0.80);
                 speaker = pNNN
    commonvoice  DIR/validated.tsv (train; dev.tsv for --val-data) or a named split file
                 (DIR/train.tsv): columns by the header (client_id, path, sentence, down_votes,
                 locale), audio = DIR/clips/<path>; speaker = client_id, language = locale;
                 rows with down-votes are left out (counted)

The folder layout is recognised by itself, or named by `data.format`. Indexing walks folders
with `os.scandir` (no `stat` per file) and opens one transcript file per LibriTTS chapter. This
module does not import TensorFlow.
"""

from __future__ import annotations

import csv
import hashlib
import os
from typing import Dict, List, Optional, Tuple

from myxtts.data import metadata as metadata_lib
from myxtts.data.metadata import AUDIO_EXTENSIONS, DatasetError, ParseProblem, Row

LAYOUTS = ("auto", "ljspeech", "libritts", "vctk", "commonvoice")
LOOKED_FOR = ("metadata.csv + wavs/ (LJSpeech), SPEAKER/CHAPTER/SPEAKER_CHAPTER.trans.tsv "
              "(LibriTTS: name one subset such as train-clean-100), txt/ + "
              "wav48_silence_trimmed/ (VCTK) or validated.tsv + clips/ (Common Voice)")
VCTK_AUDIO = ("wav48_silence_trimmed", "wav48", "wav22_silence_trimmed", "wav22", "wav16")
LIBRITTS_SUBSETS = ("train-clean-100", "train-clean-360", "train-other-500", "dev-clean",
                    "dev-other", "test-clean", "test-other")


def _subdirs(directory: str) -> List[Tuple[str, str]]:
    """(name, path) of the folders in `directory`, sorted (d_type: no stat per entry)."""
    try:
        with os.scandir(directory) as it:
            return sorted((e.name, e.path) for e in it if e.is_dir() and
                          not e.name.startswith("."))
    except OSError:
        return []


def _files(directory: str) -> List[Tuple[str, str]]:
    try:
        with os.scandir(directory) as it:
            return sorted((e.name, e.path) for e in it if e.is_file())
    except OSError:
        return []


def _is_libritts(directory: str) -> bool:
    """A speaker folder of `directory` holds chapter folders of SPEAKER_CHAPTER_* transcripts."""
    for speaker, speaker_path in _subdirs(directory)[:3]:
        for chapter, chapter_path in _subdirs(speaker_path)[:1]:
            prefix = f"{speaker}_{chapter}"
            if any(name.startswith(prefix) and name.endswith((".trans.tsv", ".normalized.txt"))
                   for name, _ in _files(chapter_path)):
                return True
    return False


def _vctk_audio_dir(directory: str) -> Optional[str]:
    if not os.path.isdir(os.path.join(directory, "txt")):
        return None
    return next((os.path.join(directory, name) for name in VCTK_AUDIO
                 if os.path.isdir(os.path.join(directory, name))), None)


def detect(directory: str) -> Optional[str]:
    """The layout of dataset folder `directory`, or None when none fits."""
    if any(os.path.isfile(os.path.join(directory, name)) for name in
           ("metadata.csv", "metadata_train.csv", "metadata_eval.csv", "metadata_val.csv")):
        return "ljspeech"
    if (os.path.isfile(os.path.join(directory, "validated.tsv")) or
            os.path.isfile(os.path.join(directory, "train.tsv"))) and \
            os.path.isdir(os.path.join(directory, "clips")):
        return "commonvoice"
    if _vctk_audio_dir(directory):
        return "vctk"
    if _is_libritts(directory):
        return "libritts"
    return None


def find_source(path: str, role: str, layout: str = "auto") -> str:
    """The source of dataset flag value `path` for role 'train' or 'val': a metadata file
    (LJSpeech), a folder (LibriTTS, VCTK) or a .tsv file (Common Voice). Raises DatasetError
    naming what was looked for when no layout fits, or when `layout` names another one."""
    if layout not in LAYOUTS:
        raise DatasetError(f"data.format {layout!r} is not one of {', '.join(LAYOUTS)}.")
    if path and os.path.isfile(path) and path.endswith(".tsv") and layout in ("auto",
                                                                             "commonvoice"):
        return path
    found = detect(path) if path and os.path.isdir(path) and os.listdir(path) else None
    if layout != "auto" and found not in (None, layout):
        raise DatasetError(f"data.format is {layout!r}, but the dataset folder {path} holds a "
                           f"{found} layout. Set data.format to {found!r} or 'auto', or name "
                           f"the {layout} folder.")
    if found is None and layout not in ("auto", "ljspeech"):
        raise DatasetError(f"data.format is {layout!r}, but the dataset folder {path} does not "
                           f"hold that layout. Looked for {LOOKED_FOR}.")
    if found == "commonvoice":
        names = ["validated.tsv", "train.tsv"] if role == "train" else \
            ["dev.tsv", "validated.tsv"]
        return next(os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n)))
    if found in ("libritts", "vctk"):
        return path
    if found is None and path and os.path.isdir(path):
        subsets = [name for name, _ in _subdirs(path) if name in LIBRITTS_SUBSETS]
        if subsets:
            raise DatasetError(
                f"{path} holds the LibriTTS subsets {', '.join(subsets)}: name one, e.g. "
                f"--train-data {os.path.join(path, subsets[0])} (and --val-data "
                f"{os.path.join(path, 'dev-clean')} for validation).")
    return metadata_lib.find_metadata(path, role)


def layout_of(source: str) -> str:
    if os.path.isdir(source):
        return "vctk" if _vctk_audio_dir(source) else "libritts"
    return "commonvoice" if source.endswith(".tsv") else "ljspeech"


def dataset_folder(source: str) -> str:
    """The dataset folder a source belongs to (what --train-data named)."""
    return source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))


def check_source(path: str, role: str, layout: str = "auto") -> None:
    """Finds the source (raising what find_source raises) and checks an LJSpeech metadata file's
    separator, before anything is read."""
    source = find_source(path, role, layout)
    if layout_of(source) == "ljspeech":
        metadata_lib.check_separator(source)


def read_source(source: str, default_speaker: str, default_language: str,
                vctk_mic: str = "mic1") -> Tuple[List[Row], List[ParseProblem]]:
    """The rows and parse problems of a source (find_source); never raises for a bad row."""
    layout = layout_of(source)
    if layout == "libritts":
        return _read_libritts(source, default_language)
    if layout == "vctk":
        return _read_vctk(source, default_language, vctk_mic)
    if layout == "commonvoice":
        return _read_commonvoice(source, default_language)
    return metadata_lib.read_metadata(source, default_speaker, default_language)


def dataset_languages(train_dir: str, val_dir: Optional[str], default_language: str,
                      layout: str = "auto", vctk_mic: str = "mic1") -> List[str]:
    """The languages of the rows of a training folder (and validation folder), in the order
    they first appear (rows without a language column have `default_language`)."""
    train = find_source(train_dir, "train", layout)
    paths = [train, find_source(val_dir, "val", layout) if val_dir
             else metadata_lib.eval_metadata_beside(train)]
    languages: Dict[str, None] = {}
    for path in filter(None, paths):
        for row in read_source(path, "", default_language, vctk_mic)[0]:
            languages.setdefault(row.language)
    return list(languages)


def source_digest(source: Optional[str]) -> str:
    """What a saved validation compares: a metadata/TSV file's bytes, or a folder corpus's
    transcript files (path, size, mtime)."""
    if not source:
        return "absent"
    if not os.path.isdir(source):
        if not os.path.isfile(source):
            return "absent"
        h = hashlib.sha256()
        with open(source, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        return h.hexdigest()
    h = hashlib.sha256()
    for path in _transcript_files(source):
        st = os.stat(path)
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _transcript_files(source: str) -> List[str]:
    if layout_of(source) == "vctk":
        return [p for _, speaker in _subdirs(os.path.join(source, "txt"))
                for name, p in _files(speaker) if name.endswith(".txt")]
    out = []
    for _, speaker in _subdirs(source):
        for _, chapter in _subdirs(speaker):
            names = _files(chapter)
            tsv = [p for n, p in names if n.endswith(".trans.tsv")]
            out += tsv or [p for n, p in names if n.endswith(".normalized.txt")]
    return out


def _audio_by_stem(names: List[Tuple[str, str]]) -> Dict[str, str]:
    """stem → path of the audio files among `names` (.wav before .flac, ...)."""
    rank = {ext: i for i, ext in enumerate(AUDIO_EXTENSIONS)}
    found: Dict[str, Tuple[int, str]] = {}
    for name, path in names:
        stem, ext = os.path.splitext(name)
        r = rank.get(ext.lower())
        if r is not None and (stem not in found or r < found[stem][0]):
            found[stem] = (r, path)
    return {stem: path for stem, (_, path) in found.items()}


def _read_text(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8").strip()
    except UnicodeDecodeError:
        return None


def _read_libritts(directory: str, language: str) -> Tuple[List[Row], List[ParseProblem]]:
    rows: List[Row] = []
    problems: List[ParseProblem] = []
    for speaker, speaker_path in _subdirs(directory):
        for _, chapter_path in _subdirs(speaker_path):
            names = _files(chapter_path)
            audio = _audio_by_stem(names)
            heard = set()
            tsv = [p for n, p in names if n.endswith(".trans.tsv")]
            if tsv:
                with open(tsv[0], "rb") as f:
                    lines = f.read().split(b"\n")
                for number, raw in enumerate(lines, start=1):
                    raw = raw.rstrip(b"\r")
                    if not raw.strip():
                        continue
                    try:
                        cols = raw.decode("utf-8").split("\t")
                    except UnicodeDecodeError as e:
                        problems.append(ParseProblem("non_utf8", tsv[0], number,
                                                     f"byte {e.start}"))
                        continue
                    if len(cols) < 2 or not cols[0].strip():
                        problems.append(ParseProblem(
                            "wrong_columns", tsv[0], number,
                            f"{len(cols)} tab-separated column(s) (expected id, original text, "
                            f"normalized text): {raw[:60].decode('utf-8')!r}"))
                        continue
                    uid = cols[0].strip()
                    heard.add(uid)
                    rows.append(Row(uid, cols[-1].strip(), speaker, language, audio.get(uid),
                                    tsv[0], number))
                problems += _untranscribed(audio, heard)
            else:
                _text_file_rows(names, ".normalized.txt", speaker, language, audio, rows,
                                problems)
    return rows, problems


def _untranscribed(audio: Dict[str, str], heard) -> List[ParseProblem]:
    return [ParseProblem("no_transcript", path, 0, os.path.basename(path))
            for uid, path in sorted(audio.items()) if uid not in heard]


def _text_file_rows(names: List[Tuple[str, str]], suffix: str, speaker: str, language: str,
                    audio: Dict[str, str], rows: List[Row], problems: List[ParseProblem]) -> None:
    """Adds a row for each <id><suffix> transcript file among `names` (audio: id -> file), and
    a no_transcript problem for each audio file without one."""
    heard = set()
    for name, path in names:
        if not name.endswith(suffix):
            continue
        uid = name[:-len(suffix)]
        text = _read_text(path)
        if text is None:
            problems.append(ParseProblem("non_utf8", path, 1, "not UTF-8"))
            continue
        heard.add(uid)
        rows.append(Row(uid, text, speaker, language, audio.get(uid), path, 1))
    problems += _untranscribed(audio, heard)


def _read_vctk(directory: str, language: str,
               mic: str) -> Tuple[List[Row], List[ParseProblem]]:
    audio_dir = _vctk_audio_dir(directory)
    rows: List[Row] = []
    problems: List[ParseProblem] = []
    speakers = dict(_subdirs(os.path.join(directory, "txt")))
    for name, path in _subdirs(audio_dir):
        speakers.setdefault(name, "")
    for speaker in sorted(speakers):
        audio = _audio_by_stem(_files(os.path.join(audio_dir, speaker)))
        # VCTK 0.92 names each take <id>_mic1/<id>_mic2; 0.80 has one <id>.wav.
        by_id = {stem[:-len(mic) - 1]: p for stem, p in audio.items() if stem.endswith("_" + mic)}
        by_id.update({stem: p for stem, p in audio.items()
                      if not stem.endswith(("_mic1", "_mic2"))})
        txt_dir = speakers[speaker]
        _text_file_rows(_files(txt_dir) if txt_dir else [], ".txt", speaker, language, by_id,
                        rows, problems)
    return rows, problems


def _read_commonvoice(path: str, default_language: str) -> Tuple[List[Row], List[ParseProblem]]:
    clips = dict(_files(os.path.join(os.path.dirname(os.path.abspath(path)), "clips")))
    rows: List[Row] = []
    problems: List[ParseProblem] = []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    try:
        header = [c.strip() for c in lines[0].decode("utf-8-sig").rstrip("\r").split("\t")]
    except UnicodeDecodeError:
        header = []
    missing = [c for c in ("client_id", "path", "sentence") if c not in header]
    if missing:
        raise DatasetError(f"{path}: line 1 must be Common Voice's header naming the columns "
                           f"(client_id, path, sentence, ... tab-separated); it lacks "
                           f"{', '.join(missing)}. Name the release's validated.tsv or a split "
                           f"file such as train.tsv.")
    column = {name: i for i, name in enumerate(header)}
    for number, raw in enumerate(lines[1:], start=2):
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problems.append(ParseProblem("non_utf8", path, number, f"byte {e.start}"))
            continue
        # Sentences may hold quotes: fields are split on tabs only, never CSV-quoted.
        cols = next(csv.reader([line], delimiter="\t", quoting=csv.QUOTE_NONE))
        if len(cols) != len(header):
            problems.append(ParseProblem("wrong_columns", path, number,
                                         f"{len(cols)} tab-separated columns (the header has "
                                         f"{len(header)}): {line[:60]!r}"))
            continue
        down = cols[column["down_votes"]].strip() if "down_votes" in column else ""
        if down not in ("", "0"):
            problems.append(ParseProblem("down_voted", path, number,
                                         f"{cols[column['path']]}: {down} down-vote(s)"))
            continue
        clip = cols[column["path"]].strip()
        language = (cols[column["locale"]].strip() if "locale" in column else "") or \
            default_language
        rows.append(Row(os.path.splitext(clip)[0], cols[column["sentence"]].strip(),
                        cols[column["client_id"]].strip(), language,
                        clips.get(clip), path, number))
    return rows, problems
