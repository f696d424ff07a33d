"""Long recordings: cutting a recording with one transcript into pieces whose text is known.

A piece needs its own transcript, and a recording says nothing about which words fall where, so a
cut is only made where two independent signs agree:

  * the recording pauses: a stretch of at least MIN_PAUSE_SECONDS quieter than data.trim_top_db
    below the loudest frame, inside the speech (`voiced_intervals`);
  * the transcript has punctuation (. , ; : ! ?) followed by a space (`punctuation_marks`) that
    is heard there.

Where each mark is heard comes from an aligner when one can speak the language
(`myxtts.data.transcript_alignment`: espeak-ng and dynamic time warping; within HEARD_SECONDS
for most marks), else from the speaking rate alone (the mark's share of the transcript's letters
is its share of the speaking time, pauses excluded; within max(RATE_SECONDS, RATE_SHARE of the
speaking time)). A mark may pair with a pause only if no other mark is heard nearly as close to
it (HEARD_MARGIN, the same share of the tolerance): ambiguous places are not cut.

Which pairs to cut at is decided for the whole recording at once (`_align`), so a chapter of an
audiobook with its text cuts as well as a long sentence: a dynamic programme picks the pairs,
both in order, under which every piece is spoken at RATE_RANGE of the recording's letters per
second, and among those the chain that costs least: per piece its speaking time x log(its rate
/ the recording's)^2, per cut (miss / tolerance)^2 and a little more for a pause shorter than
SHORT_PAUSE_SECONDS. Pieces must last data.min_audio_seconds..data.max_audio_seconds; a stretch
that cannot be cut that fine (a long sentence spoken without a pause) is left out at a cost of
DROP_COST_PER_SECOND, so one such sentence does not lose a whole chapter. The cuts are made in
the middle of paired pauses. A recording that cannot be aligned is not cut: it is skipped as
too_long, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import List, Optional, Sequence, Tuple

import librosa
import numpy as np

MIN_PAUSE_SECONDS = 0.2
RATE_RANGE = (0.7, 1.4)
SHORT_PAUSE_SECONDS = 0.3
DROP_COST_PER_SECOND = 0.1
# The longest stretch (in max_audio_seconds) one left-out piece may span.
LONGEST_DROP = 6
# Where marks are heard: by an aligner within HEARD_SECONDS (cost scale; at most 2.5x that
# away), by the speaking rate within max(RATE_SECONDS, RATE_SHARE x speaking time).
HEARD_SECONDS = 0.2
RATE_SECONDS = 0.5
RATE_SHARE = 0.08
# Tolerances a mark may miss its pause by, and how much nearer than every other mark it must be.
MISS_LIMIT = 2.5
HEARD_MARGIN = 1.5
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


def punctuation_marks(text: str) -> List[int]:
    """The character positions right after each punctuation mark a cut may follow."""
    return [m.end() for m in _BOUNDARY.finditer(text)]


def _letters(text: str) -> int:
    return sum(c.isalnum() for c in text)


@dataclasses.dataclass(frozen=True)
class _Node:
    """A cut (or the recording's start/end): letters and speaking time before it, where it is."""

    letters: float
    speaking: float
    sample: int
    pause_seconds: float = 1.0
    miss: float = 0.0  # how far the mark was heard from this pause, in tolerances


def _align(nodes_by_pause: Sequence[Sequence[Tuple[int, _Node]]], start: _Node, end: _Node,
           rate: float, sample_rate: int, shortest: int, longest: int):
    """The cheapest chain start -> cuts -> end (module docstring) as [(boundary, node, kept)],
    kept telling whether the piece that ends at that node is kept; None when none fits.
    nodes_by_pause[p] holds (boundary index, node) for pause p, in boundary order."""
    inf = float("inf")
    # best[(p, b)] = (cost, previous key, kept); the start is (-1, -1), the end (P, B).
    best = {(-1, -1): (0.0, None, True)}
    nodes = {(-1, -1): start}
    drop_span = LONGEST_DROP * longest
    layers = [*[[((p, b), node) for b, node in layer] for p, layer in enumerate(nodes_by_pause)],
              [((len(nodes_by_pause), 1 << 30), end)]]
    done: List[Tuple[Tuple[int, int], _Node]] = [((-1, -1), start)]
    for layer in layers:
        for key, node in layer:
            cost, previous, kept = inf, None, True
            for prev_key, prev in reversed(done):  # nearest first: stop past drop_span
                length = node.sample - prev.sample
                if length > drop_span:
                    break
                if prev_key[0] >= key[0] or prev_key[1] >= key[1]:
                    continue
                speaking, letters = node.speaking - prev.speaking, node.letters - prev.letters
                if speaking <= 0 or letters <= 0:
                    continue
                relative = letters / speaking / rate
                if not RATE_RANGE[0] <= relative <= RATE_RANGE[1]:
                    continue
                keep = shortest <= length <= longest
                step = (speaking / sample_rate * np.log(relative) ** 2
                        + max(0.0, SHORT_PAUSE_SECONDS - node.pause_seconds)
                        + node.miss ** 2
                        + (0.0 if keep else DROP_COST_PER_SECOND * length / sample_rate))
                total = best[prev_key][0] + step
                if total < cost:
                    cost, previous, kept = total, prev_key, keep
            if previous is not None:
                best[key] = (cost, previous, kept)
                nodes[key] = node
        done += [(key, node) for key, node in layer if key in best]
    final = layers[-1][0][0]
    if final not in best:
        return None
    chain, key = [], final
    while key != (-1, -1):
        _, previous, kept = best[key]
        chain.append((key[1], nodes[key], kept))
        key = previous
    return chain[::-1]


def _recording_position(speaking: float, spans: Sequence[Tuple[int, int]],
                        speaking_before: np.ndarray) -> float:
    """The sample of the recording reached after `speaking` samples of speech (pauses skipped):
    the end of a span when `speaking` ends exactly there."""
    k = min(int(np.searchsorted(speaking_before, speaking)), len(spans) - 1)
    return spans[k][1] - (float(speaking_before[k]) - speaking)


def split_utterance(text: str, voiced: Sequence[Sequence[int]], num_samples: int,
                    sample_rate: int, min_seconds: float, max_seconds: float,
                    heard: Optional[Sequence[float]] = None) -> Tuple[List[Piece], str]:
    """(pieces, "") for a recording longer than `max_seconds` that can be cut honestly (module
    docstring), else ([], the reason). `heard`: the sample where an aligner heard each of
    `punctuation_marks(text)`; without it the speaking rate places them."""
    spans = [(int(a), int(b)) for a, b in voiced]
    if len(spans) < 2:
        return [], "no pause inside the speech"
    speaking_before = np.cumsum([b - a for a, b in spans])  # speaking samples up to pause i
    total_letters, total_speaking = _letters(text), float(speaking_before[-1])
    marks = punctuation_marks(text)
    letters_at = [float(_letters(text[:end])) for end in marks]
    boundaries = [i for i, at in enumerate(letters_at) if 0 < at < total_letters]
    if not boundaries:
        return [], "its transcript has no punctuation to cut at"
    rate = total_letters / total_speaking  # letters per speaking sample
    if heard is None:
        heard = [_recording_position(at / rate, spans, speaking_before) for at in letters_at]
        tolerance = max(RATE_SECONDS, RATE_SHARE * total_speaking / sample_rate)
    else:
        tolerance = HEARD_SECONDS
    # misses[i][b]: seconds between pause i and where mark b was heard.
    misses = [{b: max(0.0, spans[i][1] - heard[b], heard[b] - spans[i + 1][0]) / sample_rate
               for b in boundaries} for i in range(len(spans) - 1)]
    nodes_by_pause = []
    for i, miss_of in enumerate(misses):
        pause = _Node(0.0, float(speaking_before[i]), (spans[i][1] + spans[i + 1][0]) // 2,
                      (spans[i + 1][0] - spans[i][1]) / sample_rate)
        layer = []
        for b, miss in miss_of.items():
            nearest_other = min((m for c, m in miss_of.items() if c != b), default=np.inf)
            if miss <= MISS_LIMIT * tolerance and nearest_other >= miss + HEARD_MARGIN * tolerance:
                layer.append((b, dataclasses.replace(pause, letters=letters_at[b],
                                                     miss=miss / tolerance)))
        nodes_by_pause.append(layer)
    chain = _align(nodes_by_pause, _Node(0.0, 0.0, 0), _Node(float(total_letters),
                   total_speaking, num_samples), rate, sample_rate,
                   int(min_seconds * sample_rate), int(max_seconds * sample_rate))
    if chain is None or len(chain) == 1:
        return [], "no pause falls where the transcript's punctuation predicts one"
    pieces, previous_end, previous_sample = [], 0, 0
    for b, node, kept in chain:
        end = marks[b] if b < len(marks) else len(text)
        if kept:
            pieces.append(Piece(previous_sample, node.sample - previous_sample,
                                text[previous_end:end].strip()))
        previous_end, previous_sample = end, node.sample
    if not pieces:
        return [], (f"the pauses that match its punctuation do not give pieces of "
                    f"{min_seconds:g}-{max_seconds:g} s")
    return pieces, ""
