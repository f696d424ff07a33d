"""Measures of a synthesised utterance, pure numpy (no TensorFlow).

Alignment measures take one item's text attention `alignment` [decoder steps, tokens] (rows:
the valid decoder steps; columns: the item's real tokens; each row sums to ~1):

    attention_focus(alignment)         mean over steps of the largest weight (1 = sharp)
    attention_monotonicity(alignment)  share of step-to-step moves of the peak that do not go
                                       backwards by more than one token
    attention_coverage(alignment)      share of tokens that are the peak at some step
"""

from __future__ import annotations

from typing import Dict

import numpy as np


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
