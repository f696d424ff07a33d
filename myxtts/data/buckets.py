"""Length buckets: a few static batch shapes so an XLA-compiled step compiles once per bucket.

Each bucket has a static padded mel length (a multiple of model.reduction_factor), a static padded
token length and its own batch size, chosen so every bucket holds about the same number of padded
mel frames: data.batch_size utterances in the longest bucket and proportionally more in shorter
ones, or, with data.max_frames_per_batch, as many as fit that budget of padded frames (a budget
that does not depend on the corpus' longest utterance). Boundaries come from data.bucket_boundaries or, when that is empty, from the
training set's lengths: the data.num_buckets boundaries that minimise the padded frames (exact
dynamic programme over the distinct lengths; quantiles leave more padding on skewed data).
This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Sequence

import numpy as np

from myxtts.errors import MyXTTSError

MAX_DISTINCT = 1500


@dataclasses.dataclass(frozen=True)
class Bucket:
    """One static batch shape: [batch_size, max_tokens] tokens, [batch_size, frames, n_mels]
    mels. Utterances with at most `frames` mel frames belong here (lowest such bucket)."""

    frames: int
    max_tokens: int
    batch_size: int


def round_up(value: int, multiple: int) -> int:
    return int(math.ceil(value / multiple) * multiple)


def optimal_boundaries(lengths: Sequence[int], num_buckets: int) -> List[int]:
    """Upper bounds (each an observed length) minimising sum(bucket bound - length).
    Lengths are first rounded up to a grid of at most MAX_DISTINCT values (memory is m**2)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    step = max(1, int(math.ceil(lengths.max() / MAX_DISTINCT)))
    values, counts = np.unique(-(-lengths // step) * step, return_counts=True)
    m = len(values)
    k = min(num_buckets, m)
    if k == m:
        return [int(v) for v in values]
    cum_n = np.concatenate([[0], np.cumsum(counts)])
    cum_len = np.concatenate([[0], np.cumsum(values * counts)])
    # cost[i, j]: values i..j-1 padded to values[j-1]
    i = np.arange(m + 1)[:, None]
    j = np.arange(m + 1)[None, :]
    last = values[np.clip(j - 1, 0, m - 1)]
    cost = np.where(j > i, (cum_n[j] - cum_n[i]) * last - (cum_len[j] - cum_len[i]), np.inf)
    best = np.full((k + 1, m + 1), np.inf)
    arg = np.zeros((k + 1, m + 1), dtype=np.int64)
    best[0, 0] = 0.0
    for b in range(1, k + 1):
        total = best[b - 1][:, None] + cost  # [i, j]
        arg[b] = np.argmin(total, axis=0)
        best[b] = total[arg[b], np.arange(m + 1)]
    bounds, end = [], m
    for b in range(k, 0, -1):
        bounds.append(int(values[end - 1]))
        end = int(arg[b, end])
    return sorted(bounds)


class BucketError(MyXTTSError, ValueError):
    """A frame budget too small for the longest bucket."""


def make_buckets(frame_lengths: Sequence[int], token_lengths: Sequence[int], num_buckets: int,
                 boundaries: Sequence[int], batch_size: int, reduction_factor: int,
                 token_multiple: int = 8, replicas: int = 1,
                 max_frames_per_batch: int = 0) -> List[Bucket]:
    """Buckets covering every given utterance (train and validation together, so both see the
    same shapes). Batch sizes are rounded up to a multiple of `replicas` (with a frame budget:
    down, and at least `replicas`), so every model replica of a tf.distribute strategy gets a
    slice of the same padded shape."""
    frames = np.asarray(frame_lengths, dtype=np.int64)
    tokens = np.asarray(token_lengths, dtype=np.int64)
    longest = int(frames.max())
    if not boundaries:
        boundaries = optimal_boundaries(-(-frames // reduction_factor) * reduction_factor,
                                        num_buckets)
    bounds = sorted({round_up(int(b), reduction_factor) for b in boundaries})
    bounds = [b for b in bounds if b < round_up(longest, reduction_factor)]
    bounds.append(round_up(longest, reduction_factor))
    assignment = np.searchsorted(np.asarray(bounds), frames, side="left")
    buckets = []
    for index, bound in enumerate(bounds):
        members = tokens[assignment == index]
        if members.size == 0:
            continue
        if max_frames_per_batch:
            size = max_frames_per_batch // bound // replicas * replicas
            if size < replicas:
                raise BucketError(
                    f"data.max_frames_per_batch {max_frames_per_batch} holds no {replicas} "
                    f"utterance(s) of the {bound}-frame bucket (one per model replica): raise "
                    f"it to at least {bound * replicas}, or lower data.max_audio_seconds.")
        else:
            size = round_up(max(1, int(batch_size * bounds[-1] // bound)), replicas)
        buckets.append(Bucket(bound, round_up(int(members.max()), token_multiple), size))
    return buckets


def bucket_index(buckets: Sequence[Bucket], frames: int) -> int:
    for index, bucket in enumerate(buckets):
        if frames <= bucket.frames:
            return index
    return len(buckets) - 1


def padding_fraction(frame_lengths: Sequence[int], bounds: Sequence[int]) -> float:
    """Padded frames / total frames when each utterance is padded to its bucket's bound."""
    frames = np.asarray(frame_lengths, dtype=np.int64)
    sorted_bounds = np.asarray(sorted(bounds))
    padded = sorted_bounds[np.minimum(np.searchsorted(sorted_bounds, frames, side="left"),
                                      len(sorted_bounds) - 1)]
    padded = np.maximum(padded, frames)
    return float((padded - frames).sum() / padded.sum())
