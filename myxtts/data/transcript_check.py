"""The transcript check (`train_main.py --validate-only --check-transcripts`): the recogniser
hears every usable row, and the rows whose transcript disagrees with what was heard far more
than the corpus's other rows do are listed, worst first, and written as a file of ids that
`data.exclude_rows` leaves out of training.

Each row is heard twice: freely, and with its transcript as Whisper's prompt (which draws the
spelling of what it hears towards the transcript's, so the recogniser's own slips mostly vanish
while a word the transcript lacks or adds still shows). A row is suspect when

* **another sentence**: what was heard freely is not much nearer its own transcript than other
  rows' transcripts (`ratio`: its CER against its transcript over the median CER against
  `OTHERS` other transcripts of the corpus; above `OTHER_SENTENCE`), or
* **a word dropped or added**: either hearing and the transcript differ by a whole word whose
  neighbours were heard exactly (`whole_word_edits`; at the ends of a row only in the free
  hearing, as the prompted one sometimes leaves out a row's first words).

A speaker whose rows are heard too unclearly to tell (their median ratio above
`JUDGED_LEVEL`: e.g. voices the recogniser does not know) is not judged, and the table says
so. The constants were chosen on one planted corpus and measured on another
(benchmarks/bench_transcript_check.py; docs/data.md, 'Transcript check').
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import statistics
import time
from typing import Callable, Dict, List, Optional, Sequence, Set

import numpy as np

from myxtts.atomic_write import atomic_write
from myxtts.data import audio_io
from myxtts.data.metadata import DatasetError
from myxtts.evaluation.metrics import character_errors, words

logger = logging.getLogger("myxtts.data")

FILE = "suspect_transcripts.txt"
OTHERS = 20
OTHER_SENTENCE = 0.55
JUDGED_LEVEL = 0.25


@dataclasses.dataclass
class Hearing:
    """One row as the recogniser heard it."""

    id: str
    split: str
    speaker: str
    audio_path: str
    transcript: str
    heard: str  # heard freely
    prompted: str  # heard with the transcript as the prompt
    cer: float  # of `heard` against the transcript
    word_edits: int = 0
    ratio: float = 0.0
    why: str = ""  # empty: not suspect


def whole_word_edits(transcript: str, heard: str, language: str = "en",
                     at_ends: bool = True) -> int:
    """Words inserted into or deleted from the transcript where the words on both sides of
    the gap were heard exactly: what a dropped or added word looks like, and what the
    recogniser's own mistakes (mostly misheard words, i.e. substitutions) rarely do."""
    ref, hyp = words(transcript, language), words(heard, language)
    n, m = len(ref), len(hyp)
    # Levenshtein table with a traceback of one optimal path.
    cost = np.zeros((n + 1, m + 1), np.int32)
    cost[:, 0] = np.arange(n + 1)
    cost[0, :] = np.arange(m + 1)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = min(cost[i - 1, j] + 1, cost[i, j - 1] + 1,
                             cost[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]))
    ops = []
    i, j = n, m
    while i or j:
        if i and j and cost[i, j] == cost[i - 1, j - 1] + (ref[i - 1] != hyp[j - 1]):
            ops.append("=" if ref[i - 1] == hyp[j - 1] else "s")
            i, j = i - 1, j - 1
        elif i and cost[i, j] == cost[i - 1, j] + 1:
            ops.append("d")
            i -= 1
        else:
            ops.append("i")
            j -= 1
    ops.reverse()
    edits = 0
    for k, op in enumerate(ops):
        if op in "di":
            end = "=" if at_ends else "end"
            before = ops[k - 1] if k else end
            after = ops[k + 1] if k + 1 < len(ops) else end
            edits += before == "=" and after == "="
    return edits


def hear(items: Dict[str, Sequence], transcripts: Dict[str, str], languages: Sequence[str],
         recognizer, data_config,
         progress: Optional[Callable[[int, int], None]] = None) -> tuple:
    """(hearings, rows not heard and why) of the usable items of each split.

    transcripts: row id -> the row's text as written (items hold cleaned or phonemized text).
    """
    hearings: List[Hearing] = []
    not_heard: Dict[str, int] = {}
    todo = [(split, item) for split, split_items in items.items() for item in split_items]
    for done, (split, item) in enumerate(todo, start=1):
        language = languages[item.language_id]
        text = transcripts.get(item.id)
        if text is None and not data_config.use_phonemes:
            text = item.text  # a piece of a split recording: its own (cleaned) words
        if not recognizer.hears(language):
            not_heard[f"language {language} (the recogniser hears English)"] = \
                not_heard.get(f"language {language} (the recogniser hears English)", 0) + 1
            continue
        if not text or not words(text, language):
            not_heard["no words to compare"] = not_heard.get("no words to compare", 0) + 1
            continue
        samples = audio_io.decode(item.audio_path, data_config.sample_rate,
                                  data_config.trim_silence, data_config.trim_top_db).samples
        samples = samples[item.offset:item.offset + item.num_samples]
        heard = recognizer.transcribe(samples, data_config.sample_rate, language)
        prompted = recognizer.transcribe(samples, data_config.sample_rate, language,
                                         prompt=text)
        errors, count = character_errors(text, heard, language)
        edits = max(whole_word_edits(text, heard, language),
                    whole_word_edits(text, prompted, language, at_ends=False))
        hearings.append(Hearing(item.id, split, item.speaker, item.audio_path, text, heard,
                                prompted, errors / max(count, 1), edits))
        if progress:
            progress(done, len(todo))
    return hearings, not_heard


def _ratio(hearing: Hearing, others: Sequence[str]) -> float:
    """CER against its own transcript over the median CER against `others`."""
    rates = [e / max(c, 1) for e, c in (character_errors(t, hearing.heard) for t in others)]
    return hearing.cer / max(statistics.median(rates), 1e-6) if rates else 0.0


def judge(hearings: List[Hearing], seed: int = 0) -> tuple:
    """(suspects worst first, {speaker: median ratio} of the speakers not judged)."""
    rng = random.Random(seed)
    pool = sorted({h.transcript for h in hearings})
    by_speaker: Dict[str, List[Hearing]] = {}
    for h in hearings:
        others = [t for t in pool if t != h.transcript]
        h.ratio = _ratio(h, rng.sample(others, min(OTHERS, len(others))))
        by_speaker.setdefault(h.speaker, []).append(h)
    unjudged = {}
    for speaker, rows in by_speaker.items():
        level = statistics.median(h.ratio for h in rows)
        if level > JUDGED_LEVEL:
            unjudged[speaker] = level
            continue
        for h in rows:
            if h.ratio > OTHER_SENTENCE:
                h.why = (f"another sentence: heard no nearer its transcript than others' "
                         f"(ratio {h.ratio:.2f}, CER {h.cer:.2f})")
            elif h.word_edits:
                h.why = f"{h.word_edits} word(s) dropped or added (CER {h.cer:.2f})"
    suspects = sorted((h for h in hearings if h.why),
                      key=lambda h: (h.ratio <= OTHER_SENTENCE, -h.ratio, h.id))
    return suspects, unjudged


def table(hearings: List[Hearing], suspects: List[Hearing], unjudged: Dict[str, float],
          not_heard: Dict[str, int], seconds: float, ids_path: str, shown: int = 30) -> str:
    lines = ["Transcript check (each row heard by the recogniser, freely and prompted with its "
             "transcript)",
             f"  heard {len(hearings)} rows in {seconds:.0f} s "
             f"({len(hearings) / max(seconds, 1e-9):.2f} rows/s)"
             + (f"; CER median {statistics.median(h.cer for h in hearings):.3f}"
                if hearings else "")]
    for why, count in sorted(not_heard.items()):
        lines.append(f"  not heard: {count} rows ({why})")
    for speaker, level in sorted(unjudged.items()):
        lines.append(f"  not judged: speaker {speaker} ({sum(h.speaker == speaker for h in hearings)}"
                     f" rows): heard too unclearly to tell (median ratio {level:.2f} > "
                     f"{JUDGED_LEVEL}; the recogniser may not know this voice)")
    judged = sum(h.speaker not in unjudged for h in hearings)
    lines.append(f"  suspect: {len(suspects)} of {judged} judged rows "
                 f"({100 * len(suspects) / max(judged, 1):.1f}%)"
                 + (", worst first:" if suspects else ""))
    for h in suspects[:shown]:
        lines += [f"    {h.id} ({h.split}, {h.speaker}): {h.why}",
                  f"      transcript: {h.transcript}", f"      heard:      {h.heard}"]
    if len(suspects) > shown:
        lines.append(f"    ... and {len(suspects) - shown} more in {ids_path}")
    if suspects:
        lines.append(f"  ids written to {ids_path}; to leave them out of training, review it and "
                     f"set data.exclude_rows: {ids_path}")
    return "\n".join(lines)


def write_ids(path: str, suspects: List[Hearing]) -> None:
    lines = ["# Rows whose transcript disagrees with what the recogniser heard (worst first):",
             "# train_main.py --validate-only --check-transcripts. Delete a line to keep its",
             "# row; data.exclude_rows: <this file> leaves the others out of training."]
    lines += [f"{h.id}\t# {h.why}; heard: {h.heard}" for h in suspects]
    atomic_write(path, "\n".join(lines) + "\n")


def read_ids(path: str) -> Set[str]:
    """The ids of a data.exclude_rows file: one per line, before a tab or '#'."""
    if not os.path.isfile(path):
        raise DatasetError(f"data.exclude_rows names {path}, which does not exist. Name a file "
                           f"of row ids (one per line; train_main.py --validate-only "
                           f"--check-transcripts writes one), or set it to ''.")
    ids = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            uid = line.split("#", 1)[0].split("\t", 1)[0].strip()
            if uid:
                ids.add(uid)
    return ids


def check(items: Dict[str, Sequence], transcripts: Dict[str, str], languages: Sequence[str],
          recognizer, data_config, ids_path: str) -> tuple:
    """Hears, judges, writes the ids file and returns (table text, suspects, hearings)."""
    started = time.monotonic()
    last = [started]

    def progress(done, total):
        if time.monotonic() - last[0] > 30:
            last[0] = time.monotonic()
            logger.info("Transcript check: %d of %d rows heard.", done, total)

    hearings, not_heard = hear(items, transcripts, languages, recognizer, data_config, progress)
    seconds = time.monotonic() - started
    suspects, unjudged = judge(hearings)
    write_ids(ids_path, suspects)
    return table(hearings, suspects, unjudged, not_heard, seconds, ids_path), suspects, hearings
