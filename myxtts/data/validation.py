"""Dataset validation: every row checked once (audio facts cached), a report users can act on.

Rules (code: what is checked → what happens):

  non_utf8            a metadata line is not UTF-8 (its line number)    → row skipped
  wrong_columns       a line has fewer than 2 or more than 5 columns    → row skipped
                      (a TSV row whose columns do not match its header)
  no_transcript       an audio file of a LibriTTS/VCTK folder has no text → file skipped
  down_voted          a Common Voice row with down-votes                → row skipped
  duplicate_id        an id already seen in the same split              → later row skipped
  missing_file        no wavs/<id>.<ext>                                → row skipped
  unreadable_audio    soundfile cannot decode it, or a WAV is truncated → row skipped
  needs_ffmpeg        an m4a/aac/mp4/webm file and no ffmpeg installed  → row skipped
  empty_audio         the file decodes to 0 samples                     → row skipped
  nonfinite_audio     NaN or Inf samples                                → row skipped
  silent_audio        peak below -60 dBFS                               → row skipped
  too_short/too_long  outside data.min_audio_seconds..max_audio_seconds → row skipped
  split_long          too long, cut at pauses matching its punctuation  → pieces kept
                      (data.split_long_utterances; myxtts.data.splitting)
  empty_text          no speakable text after cleaning                  → row skipped
  text_too_long       more than data.max_text_length characters         → row skipped
  unknown_language    language column not in data.languages             → row skipped
  unknown_characters  characters outside the vocabulary                 → removed, row kept
  stereo              more than one channel                             → downmixed, row kept
  resampled           sample rate differs from data.sample_rate         → resampled, row kept

Under data.validation_policy "skip" bad rows are counted and left out; under "fail" the same
report is printed and then a DatasetValidationError stops the run. Audio facts (decoded length,
rate, channels, peak, finiteness) are cached in a JSON file keyed by path, size, mtime and the
audio settings, so a second run decodes nothing that did not change.
This module does not import TensorFlow.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import json
import logging
import multiprocessing
import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tqdm

from myxtts.atomic_write import atomic_write
from myxtts.data import audio_io, audio_math
from myxtts.data import text as text_lib
from myxtts.data.metadata import DatasetError, ParseProblem, Row
from myxtts.data.splitting import split_utterance, voiced_intervals
from myxtts.data.transcript_alignment import espeak_voice, hear_punctuation

logger = logging.getLogger("myxtts.data")

# code → (what is wrong, what happens). Order = order in the summary table.
RULES: Dict[str, Tuple[str, str]] = {
    "non_utf8": ("metadata line is not valid UTF-8", "skipped"),
    "wrong_columns": ("metadata line has a wrong column count", "skipped"),
    "no_transcript": ("audio file without a transcript (LibriTTS, VCTK)", "skipped"),
    "down_voted": ("Common Voice clip with down-votes", "skipped"),
    "excluded": ("listed in data.exclude_rows", "left out"),
    "duplicate_id": ("id appears twice", "skipped"),
    "missing_file": ("no wavs/<id>.<ext> audio file", "skipped"),
    "unreadable_audio": ("audio cannot be decoded or is truncated", "skipped"),
    "needs_ffmpeg": ("the format needs ffmpeg, which is not installed", "skipped"),
    "empty_audio": ("audio has no samples", "skipped"),
    "nonfinite_audio": ("audio has NaN/Inf samples", "skipped"),
    "silent_audio": ("audio is silent (peak < -60 dBFS)", "skipped"),
    "too_short": ("shorter than data.min_audio_seconds", "skipped"),
    "too_long": ("longer than data.max_audio_seconds", "skipped"),
    "split_long": ("longer than data.max_audio_seconds, cut at pauses", "split"),
    "empty_text": ("no text after cleaning", "skipped"),
    "text_too_long": ("text longer than data.max_text_length", "skipped"),
    "unknown_language": ("language not in data.languages", "skipped"),
    "no_reference": ("speaker has no other utterance to serve as the voice reference",
                     "skipped"),
    "unknown_characters": ("characters outside the vocabulary", "removed"),
    "stereo": ("more than one channel", "downmixed"),
    "resampled": ("sample rate differs from data.sample_rate", "resampled"),
}
EXCLUDING = {code for code, (_, action) in RULES.items() if action in ("skipped", "left out")}
EXAMPLES_PER_RULE = 3
SPEAKERS_LISTED = 12
CACHE_VERSION = 2


class DatasetValidationError(DatasetError):
    """validation_policy=fail and the dataset has rows that would be skipped."""


@dataclasses.dataclass(frozen=True)
class Item:
    """A usable utterance: what the pipeline needs to load and batch it. A piece of a longer
    recording (split_long) is samples [offset, offset + num_samples) of its decoded audio."""

    id: str
    audio_path: str
    text: str  # cleaned (or phonemized) text, only vocabulary characters
    tokens: Tuple[int, ...]
    speaker: str
    language_id: int
    num_samples: int  # at data.sample_rate, after optional trimming
    source_rate: int
    offset: int = 0
    voice_shift: float = 1.0  # played this many times faster (myxtts.data.voice_shifts)

    @property
    def clip(self) -> Tuple[str, int, float]:
        """What identifies its audio: the file, where in it the utterance starts and its voice
        shift."""
        return self.audio_path, self.offset, self.voice_shift


@dataclasses.dataclass
class AudioFacts:
    """What decoding a file once tells validation (cached)."""

    error: Optional[str] = None
    num_samples: int = 0
    source_rate: int = 0
    channels: int = 0
    finite: bool = True
    peak: float = 0.0
    needs_ffmpeg: bool = False  # not cached: installing ffmpeg fixes it
    # Speech intervals [start, end) (splitting.voiced_intervals); only for files longer than
    # data.max_audio_seconds when data.split_long_utterances is on.
    voiced: Optional[List[List[int]]] = None


@dataclasses.dataclass(frozen=True)
class Problem:
    code: str
    split: str
    where: str  # "path:line" of the metadata row, or the audio path
    detail: str


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def split_stats(items: Sequence[Item], sample_rate: int, languages: Sequence[str]) -> dict:
    """Utterances, total duration (HH:MM:SS and seconds), the same per speaker, and
    utterances per language."""
    per_speaker: Dict[str, List[float]] = collections.defaultdict(list)
    for item in items:
        per_speaker[item.speaker].append(item.num_samples / sample_rate)
    total = sum(sum(v) for v in per_speaker.values())
    return {"utterances": len(items), "duration": format_duration(total),
            "seconds": round(total, 2),
            "speakers": {s: {"utterances": len(v), "duration": format_duration(sum(v)),
                             "seconds": round(sum(v), 2)}
                         for s, v in sorted(per_speaker.items())},
            "languages": dict(collections.Counter(languages[it.language_id] for it in items))}


@dataclasses.dataclass
class ValidationReport:
    """Counts per rule and split, the first examples with paths, and per-split statistics."""

    rows_read: Dict[str, int]
    problems: List[Problem]
    stats: Dict[str, dict]

    def count(self, code: str, split: Optional[str] = None) -> int:
        return sum(1 for p in self.problems
                   if p.code == code and (split is None or p.split == split))

    def counts(self) -> Dict[str, Dict[str, int]]:
        out: Dict[str, Dict[str, int]] = {}
        for p in self.problems:
            out.setdefault(p.code, {}).setdefault(p.split, 0)
            out[p.code][p.split] += 1
        return out

    def excluded(self, split: Optional[str] = None) -> int:
        return len({(p.split, p.where) for p in self.problems
                    if p.code in EXCLUDING and (split is None or p.split == split)})

    def table(self) -> str:
        """The summary users see: one line per rule that fired, then examples, then stats."""
        splits = list(self.rows_read)
        lines = ["Dataset validation", "  " + ", ".join(
            f"{s}: {self.rows_read[s]} rows read, {self.stats[s]['utterances']} usable"
            for s in splits)]
        counts = self.counts()
        header = f"  {'problem':<20}{'action':<11}" + "".join(f"{s:>7}" for s in splits)
        lines += ["", header, "  " + "-" * (len(header) - 2)]
        if not counts:
            lines.append("  (no problems found)")
        for code in RULES:
            if code in counts:
                lines.append(f"  {code:<20}{RULES[code][1]:<11}" +
                             "".join(f"{counts[code].get(s, 0):>7}" for s in splits))
        if counts:
            lines += ["", "  first examples:"]
            for code in RULES:
                for p in [p for p in self.problems if p.code == code][:EXAMPLES_PER_RULE]:
                    lines.append(f"    {code}: {p.where}: {p.detail}")
        for s in splits:
            st = self.stats[s]
            speakers = ", ".join(f"{k} {v['utterances']} ({v['duration']})"
                                 for k, v in list(st["speakers"].items())[:SPEAKERS_LISTED])
            if len(st["speakers"]) > SPEAKERS_LISTED:
                speakers += (f" and {len(st['speakers']) - SPEAKERS_LISTED} more (all in "
                             f"model_info.json)")
            langs = ", ".join(f"{k} {v}" for k, v in st["languages"].items())
            lines.append(f"\n  {s}: {st['utterances']} utterances, {st['duration']} "
                         f"({st['seconds']:.1f} s); speakers: {speakers or '-'}; "
                         f"languages: {langs or '-'}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"rows_read": self.rows_read, "problems": self.counts(),
                **{s: st for s, st in self.stats.items()}}


# ---- audio facts, cached ----------------------------------------------------------------------

def _wav_truncated(path: str) -> Optional[str]:
    """For RIFF/WAVE files: the data chunk claims more bytes than the file holds (libsndfile
    silently decodes the part that is there)."""
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            return None
        size = os.fstat(f.fileno()).st_size
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                return None
            cid, length = chunk[:4], struct.unpack("<I", chunk[4:])[0]
            if cid == b"data":
                missing = f.tell() + length - size
                return (f"truncated: data chunk declares {length} bytes, {missing} missing"
                        if missing > 0 else None)
            f.seek(length + (length & 1), 1)


def probe_audio(path: str, data_config) -> AudioFacts:
    """Decodes a file once the way training will, and records what validation needs."""
    d = data_config
    try:
        truncated = _wav_truncated(path)
        if truncated:
            return AudioFacts(error=truncated)
        decoded = audio_io.decode(path, d.sample_rate, d.trim_silence, d.trim_top_db)
    except audio_io.FFmpegMissingError as e:
        return AudioFacts(error=str(e), needs_ffmpeg=True)
    except Exception as e:  # pylint: disable=broad-except  # any decoder failure is a finding
        return AudioFacts(error=f"{type(e).__name__}: {e}".strip())
    samples = decoded.samples
    finite = bool(np.all(np.isfinite(samples)))
    peak = float(np.max(np.abs(samples))) if samples.size and finite else 0.0
    voiced = None
    if finite and _wants_pauses(samples.size, d):
        voiced = voiced_intervals(samples, d.sample_rate, d.trim_top_db)
    return AudioFacts(None, int(samples.size), decoded.source_rate, decoded.source_channels,
                      finite, peak, voiced=voiced)


def _wants_pauses(num_samples: int, data_config) -> bool:
    d = data_config
    return d.split_long_utterances and num_samples > d.max_audio_seconds * d.sample_rate


FACT_FIELDS = ("error", "num_samples", "source_rate", "channels", "finite", "peak", "voiced")
PROCESS_MIN_FILES = 4000  # fewer files are probed by threads (a process pool starts in ~1 s)
PROBE_CHUNK = 500


class AudioFactsCache:
    """JSON file of AudioFacts keyed by path, stored as columns (paths, stamps, facts) so a
    million entries load in seconds; an entry is valid while the file's size and mtime and the
    audio settings are unchanged."""

    def __init__(self, path: Optional[str], settings: str):
        self.path, self.settings = path, settings
        self.entries: Dict[str, Tuple[List[int], list]] = {}
        self.dirty = False
        if path and os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                if data.get("version") == CACHE_VERSION and data.get("settings") == settings:
                    self.entries = dict(zip(data["paths"], zip(data["stamps"], data["facts"])))
            except (OSError, ValueError, KeyError, TypeError):
                logger.warning("Ignoring unreadable validation cache %s.", path)

    def get(self, path: str, stamp: List[int]) -> Optional[AudioFacts]:
        entry = self.entries.get(path)
        if entry and entry[0] == stamp:
            return AudioFacts(**dict(zip(FACT_FIELDS, entry[1])))
        return None

    def put(self, path: str, stamp: List[int], facts: AudioFacts) -> None:
        self.entries[path] = (stamp, [getattr(facts, k) for k in FACT_FIELDS])
        self.dirty = True

    def save(self) -> None:
        if not (self.path and self.dirty):
            return
        try:
            atomic_write(self.path, json.dumps({
                "version": CACHE_VERSION, "settings": self.settings,
                "paths": list(self.entries), "stamps": [e[0] for e in self.entries.values()],
                "facts": [e[1] for e in self.entries.values()]}))
        except OSError as e:
            logger.warning("Could not write the validation cache %s (%s); the next run will "
                           "decode every file again.", self.path, e)


def _stamp(path: str) -> List[int]:
    try:
        st = os.stat(path)
    except OSError:
        return [-1, -1]
    return [st.st_size, st.st_mtime_ns]


def _probe_chunk(paths: Sequence[str], data_config) -> List[AudioFacts]:
    return [probe_audio(path, data_config) for path in paths]


def _probe_all(paths: Sequence[str], data_config, workers: int):
    """(path, AudioFacts) of every path, in order: by a pool of `workers` processes for many
    files (decoding is Python-bound per file: threads would share one core), else threads."""
    chunks = [paths[i:i + PROBE_CHUNK] for i in range(0, len(paths), PROBE_CHUNK)]
    if len(paths) >= PROCESS_MIN_FILES and workers > 1:
        pool = concurrent.futures.ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("spawn"))
    else:
        pool = concurrent.futures.ThreadPoolExecutor(max(1, workers))
    with pool:
        for chunk, results in zip(chunks, pool.map(_probe_chunk, chunks,
                                                   [data_config] * len(chunks))):
            yield from zip(chunk, results)


def collect_audio_facts(paths: Sequence[str], data_config, cache_path: Optional[str],
                        workers: int) -> Dict[str, AudioFacts]:
    d = data_config
    cache = AudioFactsCache(cache_path, f"{d.sample_rate}|{d.trim_silence}|{d.trim_top_db}")
    facts: Dict[str, AudioFacts] = {}
    todo = []
    stamps = {}
    for path in sorted(set(paths)):
        stamps[path] = stamp = _stamp(path)
        cached = cache.get(path, stamp)
        if cached is None or (cached.voiced is None and cached.finite and cached.error is None
                              and _wants_pauses(cached.num_samples, d)):
            todo.append(path)
        else:
            facts[path] = cached
    if todo:
        logger.info("Checking %d audio file(s) (%d cached).", len(todo), len(facts))
        progress = tqdm.tqdm(total=len(todo), desc="checking audio", unit="file",
                             disable=len(todo) < PROCESS_MIN_FILES)
        for path, result in _probe_all(todo, d, max(1, workers)):
            facts[path] = result
            if not result.needs_ffmpeg:
                cache.put(path, stamps[path], result)
            progress.update(1)
        progress.close()
        cache.save()
    return facts


# ---- the whole check --------------------------------------------------------------------------

def _audio_problem(facts: AudioFacts, data_config) -> Optional[Tuple[str, str]]:
    d = data_config
    if facts.error:
        return ("needs_ffmpeg" if facts.needs_ffmpeg else "unreadable_audio"), facts.error
    if facts.num_samples == 0:
        return "empty_audio", "0 samples"
    if not facts.finite:
        return "nonfinite_audio", "NaN or Inf samples"
    if facts.peak < audio_math.SILENCE_PEAK:
        return "silent_audio", f"peak {facts.peak:.2g}"
    seconds = facts.num_samples / d.sample_rate
    if seconds < d.min_audio_seconds:
        return "too_short", f"{seconds:.2f} s < {d.min_audio_seconds} s"
    if seconds > d.max_audio_seconds:
        return "too_long", f"{seconds:.2f} s > {d.max_audio_seconds} s"
    return None


def _split_long(row: Row, cleaned: str, facts: AudioFacts, data_config):
    """Candidates (row, text, facts, (offset, samples)) for the pieces of a too-long utterance,
    and the problem to report (split_long, or too_long with the reason it was not cut)."""
    d = data_config
    heard = None
    if facts.voiced and espeak_voice(row.language):
        samples = audio_io.decode(row.audio_path, d.sample_rate, d.trim_silence,
                                  d.trim_top_db).samples
        heard = hear_punctuation(cleaned, samples, d.sample_rate, row.language)
    pieces, reason = split_utterance(cleaned, facts.voiced or [], facts.num_samples,
                                     d.sample_rate, d.min_audio_seconds, d.max_audio_seconds,
                                     heard)
    seconds = facts.num_samples / d.sample_rate
    if not pieces:
        return [], ("too_long", f"{seconds:.2f} s > {d.max_audio_seconds} s; not cut: {reason}")
    rate = d.sample_rate
    candidates = [(dataclasses.replace(row, id=f"{row.id}#{p.offset / rate:.3f}-"
                                               f"{(p.offset + p.length) / rate:.3f}"),
                   p.text, facts, (p.offset, p.length)) for p in pieces]
    return candidates, ("split_long", f"{seconds:.2f} s cut into {len(pieces)} pieces at "
                                      + ", ".join(f"{p.offset / rate:.1f} s" for p in pieces[1:]))


def validate(rows: Dict[str, Sequence[Row]], parse_problems: Dict[str, Sequence[ParseProblem]],
             data_config, cache_path: Optional[str],
             tokenizer: Optional[text_lib.Tokenizer] = None, extend_tokenizer: bool = False,
             ) -> Tuple[ValidationReport, Dict[str, List[Item]], text_lib.Tokenizer]:
    """Checks the rows of each split ("train" first, then "val").

    The tokenizer is `tokenizer` when given (a saved vocab.json), else built from the usable
    training texts; with `extend_tokenizer`, `tokenizer` extended by the characters of those
    texts it lacks (a warm start). Returns (report, usable items per split, tokenizer).
    """
    d = data_config
    problems: List[Problem] = []
    for split, found in parse_problems.items():
        problems += [Problem(p.code, split, f"{p.metadata_path}:{p.line}" if p.line
                             else p.metadata_path, p.detail)
                     for p in found]
    paths = [r.audio_path for rs in rows.values() for r in rs if r.audio_path]
    facts = collect_audio_facts(paths, d, cache_path, d.num_workers or os.cpu_count() or 1)
    phonemize = text_lib.Phonemizer() if d.use_phonemes else None

    # (row, cleaned text, audio facts, (offset, samples) of the utterance in its file)
    candidates: Dict[str, List[Tuple[Row, str, AudioFacts, Tuple[int, int]]]] = {}
    for split, split_rows in rows.items():
        seen = set()
        keep = []
        for row in split_rows:
            where = f"{row.metadata_path}:{row.line}"
            if row.id in seen:
                problems.append(Problem("duplicate_id", split, where, f"id {row.id!r}"))
                continue
            seen.add(row.id)
            bad = None
            if row.audio_path is None:
                folder = os.path.dirname(row.metadata_path)
                bad = ("missing_file", f"no {os.path.join(folder, 'wavs', row.id)}.<wav|flac|"
                                       f"ogg|...> or {os.path.join(folder, row.id)}.<...>"
                       if row.metadata_path.endswith(".csv") else
                       f"no audio file of id {row.id!r} where its corpus layout keeps it "
                       f"(docs/data.md, 'Corpus layouts')")
            else:
                where = f"{row.audio_path} ({where})"
                bad = _audio_problem(facts[row.audio_path], d)
            if bad is None and row.language not in d.languages:
                bad = ("unknown_language", f"{row.language!r} not in data.languages "
                                           f"{list(d.languages)}")
            cleaned = text_lib.clean_text(row.text, d.text_cleaners, row.language)
            if bad is None and not cleaned:
                bad = ("empty_text", "no text")
            pieces = []
            if (bad and bad[0] == "too_long" and d.split_long_utterances and cleaned
                    and row.language in d.languages):
                pieces, bad = _split_long(row, cleaned, facts[row.audio_path], d)
            if bad:
                problems.append(Problem(bad[0], split, where, bad[1]))
            if pieces:
                keep += pieces
            elif not bad:
                f = facts[row.audio_path]
                keep.append((row, cleaned, f, (0, f.num_samples)))
        candidates[split] = keep

    if phonemize is not None:
        for split, keep in candidates.items():
            by_language: Dict[str, List[int]] = collections.defaultdict(list)
            for i, (row, _, _, _) in enumerate(keep):
                by_language[row.language].append(i)
            for language, indices in by_language.items():
                phones = phonemize([keep[i][1] for i in indices], language)
                for i, p in zip(indices, phones):
                    keep[i] = (keep[i][0], p, *keep[i][2:])

    train_texts = (text for _, text, _, _ in candidates.get("train", []))
    if tokenizer is None:
        tokenizer = text_lib.Tokenizer.build(train_texts, d.text_cleaners, d.use_phonemes)
    elif extend_tokenizer:
        tokenizer = tokenizer.extended(train_texts)
    items: Dict[str, List[Item]] = {}
    for split, keep in candidates.items():
        usable = []
        for row, cleaned, f, (offset, num_samples) in keep:
            where = f"{row.audio_path} ({row.metadata_path}:{row.line})"
            unknown = tokenizer.unknown_characters(cleaned)
            if unknown:
                problems.append(Problem("unknown_characters", split, where,
                                        "removed " + " ".join(repr(c) for c in unknown)))
                cleaned = text_lib.normalize_unicode(
                    "".join(c for c in cleaned if c not in unknown))
            if not cleaned:
                problems.append(Problem("empty_text", split, where, "no vocabulary characters"))
                continue
            if len(cleaned) > d.max_text_length:
                problems.append(Problem("text_too_long", split, where,
                                        f"{len(cleaned)} characters > {d.max_text_length}"))
                continue
            if f.channels > 1 and offset == 0:  # once per file, not per piece
                problems.append(Problem("stereo", split, where, f"{f.channels} channels"))
            if f.source_rate != d.sample_rate and offset == 0:
                problems.append(Problem("resampled", split, where,
                                        f"{f.source_rate} Hz → {d.sample_rate} Hz"))
            usable.append(Item(row.id, row.audio_path, cleaned, tuple(tokenizer.encode(cleaned)),
                               row.speaker, d.languages.index(row.language), num_samples,
                               f.source_rate, offset))
        items[split] = usable
    problems += _drop_items_without_reference(items)

    report = ValidationReport(
        rows_read={s: len(rs) + len(parse_problems.get(s, ())) for s, rs in rows.items()},
        problems=problems,
        stats={s: split_stats(items[s], d.sample_rate, d.languages) for s in rows})
    return report, items, tokenizer


class ReferencePools:
    """Each item's possible speaker references: the other utterances of its speaker in the
    training split and in its own split, never the item itself (a model that sees its target as
    the reference can copy instead of reading). Held per (split, speaker), so memory grows with
    the utterances, not with their square; `pool` lists one item's references when asked."""

    def __init__(self, items: Dict[str, List[Item]]):
        self.items = items
        self._members: Dict[Tuple[str, str], List[Item]] = collections.defaultdict(list)
        self._clips: Dict[Tuple[str, str], collections.Counter] = collections.defaultdict(
            collections.Counter)
        for split, split_items in items.items():
            for item in split_items:
                self._members[(split, item.speaker)].append(item)
                self._clips[(split, item.speaker)][item.clip] += 1

    def _keys(self, split: str, speaker: str) -> List[Tuple[str, str]]:
        return [("train", speaker)] + ([(split, speaker)] if split != "train" else [])

    def members(self, split: str, speaker: str) -> List[Item]:
        """Every utterance an item of `speaker` in `split` may take its reference from (the
        training split's first), the item itself included."""
        return [it for key in self._keys(split, speaker) for it in self._members.get(key, ())]

    def pool(self, split: str, index: int) -> List[Item]:
        """The references of item `index` of `split`. May be empty."""
        item = self.items[split][index]
        return [it for it in self.members(split, item.speaker) if it.clip != item.clip]

    def size(self, split: str, index: int) -> int:
        item = self.items[split][index]
        return sum(len(self._members.get(key, ())) - self._clips[key][item.clip]
                   for key in self._keys(split, item.speaker) if key in self._members)


def _drop_items_without_reference(items: Dict[str, List[Item]]) -> List[Problem]:
    """Leaves out (and reports) items whose speaker has no other utterance to use as the
    reference; see ReferencePools."""
    problems: List[Problem] = []
    dropped = True
    while dropped:  # a dropped training item may have been a validation item's only reference
        dropped = False
        pools = ReferencePools(items)
        for split, split_items in list(items.items()):
            keep = []
            for index, item in enumerate(split_items):
                if pools.size(split, index):
                    keep.append(item)
                    continue
                dropped = True
                problems.append(Problem("no_reference", split,
                                        f"{item.audio_path} (id {item.id})",
                                        f"speaker {item.speaker!r} has no second utterance"))
            items[split] = keep
    return problems


def enforce(report: ValidationReport, items: Dict[str, List[Item]], data_config) -> None:
    """Raises when the policy is 'fail' and rows would be skipped, or when fewer than
    data.min_train_items training rows are usable. The message ends with the summary table."""
    d = data_config
    # Rows the user listed in data.exclude_rows are a choice, not a problem of the data.
    found = [p for p in report.problems if p.code in EXCLUDING and p.code != "excluded"]
    if d.validation_policy == "fail" and found:
        first = found[0]
        raise DatasetValidationError(
            f"data.validation_policy is 'fail' and {len({(p.split, p.where) for p in found})} "
            f"row(s) have problems; "
            f"the first: {first.code} at {first.where}: {first.detail}. Fix or remove these "
            f"rows, or set data.validation_policy: skip to train without them.\n\n"
            + report.table())
    usable = len(items.get("train", []))
    if usable < d.min_train_items:
        raise DatasetError(
            f"Only {usable} usable training row(s) remain after validation, fewer than "
            f"data.min_train_items ({d.min_train_items}). See the problems in the table below, "
            f"fix the dataset or lower data.min_train_items.\n\n" + report.table())
