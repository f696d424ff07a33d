"""Long recordings: cutting an utterance with one transcript into pieces whose text is known.

A piece needs its own transcript, and a recording says nothing about which words fall where, so a
cut is only made where two independent signs agree:

  * the recording pauses: a stretch of at least MIN_PAUSE_SECONDS quieter than data.trim_top_db
    below the loudest frame, inside the speech (`voiced_intervals`);
  * the transcript has punctuation (. , ; : ! ?) followed by a space, at a position whose share
    of the transcript's letters equals that pause's share of the speaking time (pauses
    excluded), within max(TOLERANCE_SECONDS, TOLERANCE_SHARE of that time).

A pause and a punctuation mark are paired only when each is the other's only candidate. The most
precise pair splits the utterance in two and each side is searched again the same way, with a
tolerance relative to its own length (`_anchors`), so the pairs can never cross. The cuts are
made in the middle of paired pauses, choosing the fewest that leave every piece between
data.min_audio_seconds and data.max_audio_seconds; then every piece must be spoken at
RATE_RANGE of the utterance's letters per second, the check that catches a pause paired with the
wrong clause. Whatever fails is not cut: the utterance is skipped as too_long, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

import librosa
import numpy as np

MIN_PAUSE_SECONDS = 0.2
TOLERANCE_SECONDS = 0.5
TOLERANCE_SHARE = 0.1
RATE_RANGE = (0.7, 1.4)
# Punctuation a speaker may pause at, followed by a space (a cut there leaves text on both sides).
_BOUNDARY = re.compile(r"[.,;:!?]+[\"')]*(?=\s)")


@dataclasses.dataclass(frozen=True)
class Piece:
    """A part of an utterance: samples [offset, offset + length) and the words spoken there."""

    offset: int
    length: int
    text: str


def voiced_intervals(samples: np.ndarray, sample_rate: int, top_db: float) -> List[List[int]]:
    """[start, end) sample ranges of speech: louder than `top_db` below the loudest frame,
    neighbours closer than MIN_PAUSE_SECONDS merged (so the gaps between them are pauses)."""
    frame = max(64, int(0.025 * sample_rate))
    intervals = librosa.effects.split(samples, top_db=top_db, frame_length=frame,
                                      hop_length=frame // 4)
    merged: List[List[int]] = []
    for start, end in intervals.tolist():
        if merged and start - merged[-1][1] < MIN_PAUSE_SECONDS * sample_rate:
            merged[-1][1] = end
        else:
            merged.append([start, end])
    return merged


def _letters(text: str) -> int:
    return sum(c.isalnum() for c in text)


def _anchors(boundaries: Sequence[Tuple[int, float]], pauses: Sequence[Tuple[int, float]],
             low: Tuple[float, float], high: Tuple[float, float],
             min_tolerance: float) -> List[Tuple[int, int]]:
    """Index pairs (boundary, pause) between the anchors `low` and `high` ((letters, speaking
    time) of the segment's ends); boundaries and pauses are (index, letters or speaking time)."""
    letters, speaking = high[0] - low[0], high[1] - low[1]
    if letters <= 0 or speaking <= 0:
        return []
    tolerance = max(min_tolerance, TOLERANCE_SHARE * speaking)
    error = {}
    for b, at in boundaries:
        predicted = low[1] + speaking * (at - low[0]) / letters
        for p, time in pauses:
            if abs(predicted - time) <= tolerance:
                error[(b, p)] = abs(predicted - time)
    unique = [pair for pair in error
              if sum(b == pair[0] for b, _ in error) == 1
              and sum(p == pair[1] for _, p in error) == 1]
    if not unique:
        return []
    b, p = min(unique, key=error.get)
    anchor = (dict(boundaries)[b], dict(pauses)[p])
    left = _anchors([x for x in boundaries if x[0] < b], [x for x in pauses if x[0] < p],
                    low, anchor, min_tolerance)
    right = _anchors([x for x in boundaries if x[0] > b], [x for x in pauses if x[0] > p],
                     anchor, high, min_tolerance)
    return left + [(b, p)] + right


def _fewest_cuts(cuts: Sequence[int], total: int, shortest: int, longest: int,
                 ) -> Optional[List[int]]:
    """The fewest of the sorted sample positions `cuts` that leave every piece of [0, total)
    between `shortest` and `longest` samples (None when no choice does)."""
    points = [0, *cuts, total]
    best: List[Optional[List[int]]] = [[0]] + [None] * (len(points) - 1)
    for j in range(1, len(points)):
        options = [best[i] + [j] for i in range(j) if best[i] is not None
                   and shortest <= points[j] - points[i] <= longest]
        best[j] = min(options, key=len) if options else None
    return None if best[-1] is None else best[-1][1:-1]


def split_utterance(text: str, voiced: Sequence[Sequence[int]], num_samples: int,
                    sample_rate: int, min_seconds: float,
                    max_seconds: float) -> Tuple[List[Piece], str]:
    """(pieces, "") for an utterance longer than `max_seconds` that can be cut honestly (module
    docstring), else ([], the reason)."""
    spans = [(int(a), int(b)) for a, b in voiced]
    if len(spans) < 2:
        return [], "no pause inside the speech"
    # Speaking time before each pause, in samples, and where its middle is.
    speaking_before = np.cumsum([b - a for a, b in spans])
    pauses = [(i, float(speaking_before[i])) for i in range(len(spans) - 1)]
    middles = [(spans[i][1] + spans[i + 1][0]) // 2 for i in range(len(spans) - 1)]
    total_letters = _letters(text)
    marks = [m.end() for m in _BOUNDARY.finditer(text)]
    boundaries = [(i, float(_letters(text[:end]))) for i, end in enumerate(marks)
                  if 0 < _letters(text[:end]) < total_letters]
    if not boundaries:
        return [], "its transcript has no punctuation to cut at"
    pairs = _anchors(boundaries, pauses, (0.0, 0.0),
                     (float(total_letters), float(speaking_before[-1])),
                     TOLERANCE_SECONDS * sample_rate)
    if not pairs:
        return [], "no pause falls where the transcript's punctuation predicts one"
    chosen = _fewest_cuts([middles[p] for _, p in pairs], num_samples,
                          int(min_seconds * sample_rate), int(max_seconds * sample_rate))
    if chosen is None:
        return [], (f"the {len(pairs)} pause(s) that match its punctuation do not give pieces of "
                    f"{min_seconds:g}-{max_seconds:g} s")
    cut_pairs = [pairs[i - 1] for i in chosen]
    ends = [0, *(marks[b] for b, _ in cut_pairs), len(text)]
    samples = [0, *(middles[p] for _, p in cut_pairs), num_samples]
    speech_before = [0.0, *(speaking_before[p] for _, p in cut_pairs), float(speaking_before[-1])]
    rate = total_letters / speaking_before[-1]
    pieces = []
    for k in range(len(samples) - 1):
        piece_text = text[ends[k]:ends[k + 1]].strip()
        piece_rate = _letters(piece_text) / (speech_before[k + 1] - speech_before[k]) / rate
        if not RATE_RANGE[0] <= piece_rate <= RATE_RANGE[1]:
            return [], (f"piece {k + 1} would be spoken at {piece_rate:.2f}x the utterance's "
                        f"letters per second, so a pause was probably paired with the wrong "
                        f"punctuation")
        pieces.append(Piece(samples[k], samples[k + 1] - samples[k], piece_text))
    return pieces, ""
