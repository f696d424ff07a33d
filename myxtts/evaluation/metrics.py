"""Measures of a synthesised utterance, pure numpy (no TensorFlow).

Alignment measures take one item's text attention `alignment` [decoder steps, tokens] (rows:
the valid decoder steps; columns: the item's real tokens; each row sums to ~1):

    attention_focus(alignment)         mean over steps of the largest weight (1 = sharp)
    attention_monotonicity(alignment)  share of step-to-step moves of the peak that do not go
                                       backwards by more than one token
    attention_coverage(alignment)      share of tokens that are the peak at some step

Mel-cepstral distortion between log10 mels [frames, n_mels] (synthesised vs recorded):

    dtw_mcd(mel_a, mel_b)              dB, mean along the dynamic-time-warping path
    dtw_mcd_matrix(synth, recorded)    the same between every pair, from mel_cepstra
    text_match(distances [N, N])       is each synthesised sentence nearest its own recording
    match_groups(N, among)             the groups of sentences text-match judges apart

Word and character error rates of what a recogniser heard, both sides normalised alike (numbers
spelled out for English): words, word_errors, character_errors, word_error_rate.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from myxtts.data.text import multilingual_cleaner


def _valid(alignment) -> np.ndarray:
    a = np.asarray(alignment, np.float64)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"alignment must be [steps, tokens] with both > 0, got {a.shape}")
    return a


def attention_focus(alignment) -> float:
    return float(np.mean(np.max(_valid(alignment), axis=1)))


def attention_monotonicity(alignment) -> float:
    peaks = np.argmax(_valid(alignment), axis=1)
    if len(peaks) < 2:
        return 1.0
    return float(np.mean(np.diff(peaks) >= -1))


def attention_coverage(alignment) -> float:
    a = _valid(alignment)
    return float(len(np.unique(np.argmax(a, axis=1))) / a.shape[1])


def alignment_measures(alignment) -> Dict[str, float]:
    """{"focus", "monotonicity", "coverage"} of one item's alignment."""
    return {"focus": attention_focus(alignment),
            "monotonicity": attention_monotonicity(alignment),
            "coverage": attention_coverage(alignment)}


# ---- mel-cepstral distortion with dynamic time warping ----------------------------------------

MCD_COEFFICIENTS = 13
_MCD_SCALE = 10.0 / np.log(10.0) * np.sqrt(2.0)


def mel_cepstra(log10_mel, coefficients: int = MCD_COEFFICIENTS) -> np.ndarray:
    """Mel-cepstra [frames, coefficients] of a log10 mel [frames, n_mels]: the orthonormal
    DCT-II of the natural-log mel of each frame, c1..c<coefficients> (c0, the loudness, is
    dropped)."""
    mel = np.asarray(log10_mel, np.float64)
    if mel.ndim != 2 or mel.shape[0] == 0:
        raise ValueError(f"mel must be [frames, n_mels] with frames > 0, got {mel.shape}")
    n = mel.shape[1]
    if not 1 <= coefficients < n:
        raise ValueError(f"coefficients must be in [1, {n - 1}] for {n} mel bands")
    k = np.arange(1, coefficients + 1)[:, None]
    basis = np.sqrt(2.0 / n) * np.cos(np.pi / n * (np.arange(n)[None, :] + 0.5) * k)
    return (mel * np.log(10.0)) @ basis.T


def dtw_mean_cost(cost) -> float:
    """Mean of `cost` [n, m] along the dynamic-time-warping path from (0, 0) to (n-1, m-1)
    that minimises the summed cost (steps: diagonal, down, right).

    Rows are filled one at a time, each in closed form: with a = the best way into column j from
    the previous row, D[i, j] = C[j] + min_{k<=j} (a[k] - C[k-1]), C = cumsum(cost[i])."""
    c = np.asarray(cost, np.float64)
    n, m = c.shape
    total = np.empty((n, m))
    total[0] = np.cumsum(c[0])
    for i in range(1, n):
        above = total[i - 1]
        a = np.minimum(above, np.concatenate(([np.inf], above[:-1])))
        row = np.cumsum(c[i])
        total[i] = row + np.minimum.accumulate(a - np.concatenate(([0.0], row[:-1])))
    i, j, steps = n - 1, m - 1, 1
    while i > 0 or j > 0:
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            moves = ((i - 1, j - 1), (i - 1, j), (i, j - 1))
            i, j = min(moves, key=lambda p: total[p])
        steps += 1
    return float(total[-1, -1] / steps)


def frame_distances(cepstra_a, cepstra_b) -> np.ndarray:
    """Mel-cepstral distortion in dB between every frame pair: [len(a), len(b)]."""
    a, b = np.asarray(cepstra_a, np.float64), np.asarray(cepstra_b, np.float64)
    squared = (np.sum(a * a, 1)[:, None] + np.sum(b * b, 1)[None, :] - 2.0 * a @ b.T)
    return _MCD_SCALE * np.sqrt(np.maximum(squared, 0.0))


def dtw_mcd(log10_mel_a, log10_mel_b, coefficients: int = MCD_COEFFICIENTS) -> float:
    """DTW mel-cepstral distortion (dB) between two log10 mels [frames, n_mels]:
    (10/ln 10) * sqrt(2 * sum_d (c_a,d - c_b,d)^2) per aligned frame pair, averaged along the
    DTW path. 0 for identical mels; small for a time-stretched copy."""
    return dtw_mean_cost(frame_distances(mel_cepstra(log10_mel_a, coefficients),
                                         mel_cepstra(log10_mel_b, coefficients)))


def dtw_mcd_matrix(synth_cepstra: Sequence[np.ndarray],
                   recorded_cepstra: Sequence[np.ndarray]) -> np.ndarray:
    """DTW mel-cepstral distortion (dB) of every synthesised sentence [i] against every
    recording [j], from their `mel_cepstra`: [len(synth), len(recorded)]."""
    return np.array([[dtw_mean_cost(frame_distances(s, g)) for g in recorded_cepstra]
                     for s in synth_cepstra])


def text_match(distances) -> np.ndarray:
    """distances [N, N]: row i = synthesised sentence i against the recordings of sentences
    0..N-1. Returns bool [N]: True where the own recording (column i) is strictly the nearest."""
    d = np.asarray(distances, np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(f"distances must be a non-empty square matrix, got {d.shape}")
    own = np.diag(d)
    others = np.where(np.eye(len(d), dtype=bool), np.inf, d)
    return own < np.min(others, axis=1)


def match_groups(count: int, among: Optional[int] = None) -> List[np.ndarray]:
    """Indices 0..count-1 cut into consecutive groups that text-match judges apart: one group
    (every sentence against every other) without `among`, else count // among groups of `among`
    or a few more sentences each, so that no sentence is told from fewer than among - 1 others
    (chance 1/among or lower); one group when count < 2 * among."""
    if among is None or count < 2 * among:
        return [np.arange(count)]
    return np.array_split(np.arange(count), count // among)


# ---- word and character error rates -----------------------------------------------------------

def words(text: str, language: str = "en") -> List[str]:
    """The words a recogniser is judged on, reference and hypothesis alike: the project's own
    cleaner first (for English, numbers and abbreviations spelled out: "17th" -> "seventeenth",
    "$3" -> "three dollars", "Mr." -> "mister"), then lower case without punctuation (a hyphen
    parts words): "Don't, he said." -> ["don't", "he", "said"]."""
    cleaned = re.sub(r"[^\w']+", " ", multilingual_cleaner(text, language).lower())
    return [w for w in (w.strip("'_") for w in cleaned.split()) if w]


def edit_distance(reference: Sequence, hypothesis: Sequence) -> int:
    """Substitutions + deletions + insertions that turn `reference` into `hypothesis`
    (Levenshtein distance over their items)."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, start=1):
        current = [i]
        for j, h in enumerate(hypothesis, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (r != h)))
        previous = current
    return previous[-1]


def word_errors(reference: str, hypothesis: str, language: str = "en") -> Tuple[int, int]:
    """(word errors, reference word count) after `words`."""
    ref = words(reference, language)
    return edit_distance(ref, words(hypothesis, language)), len(ref)


def character_errors(reference: str, hypothesis: str, language: str = "en") -> Tuple[int, int]:
    """(character errors, reference character count) between the `words` of each joined by
    single spaces."""
    ref = " ".join(words(reference, language))
    return edit_distance(ref, " ".join(words(hypothesis, language))), len(ref)


def word_error_rate(reference: str, hypothesis: str, language: str = "en") -> float:
    """Word errors / reference words (can exceed 1 with insertions)."""
    errors, count = word_errors(reference, hypothesis, language)
    if count == 0:
        raise ValueError(f"the reference {reference!r} has no words")
    return errors / count
