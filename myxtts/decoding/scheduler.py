"""The chunk scheduler: a batch decode run a chunk of decoder steps at a time, over any
decode backend (myxtts.decoding.backend.DecodeBackend). Every driver of a decode uses it:
streaming synthesis of a checkpoint, a SavedModel or an on-device export
(myxtts.inference.streaming.stream_decode), the server's engine (myxtts.serving.engine, which
keeps only its queue and batching policy) and the on-device synthesizer's whole sentences.

    chunks = decoded_chunks(decoder, decoder.start_batch(sentences, language_ids, latents),
                            rows=jobs, first_chunk_steps=first, chunk_steps=CHUNK_STEPS)
    for chunk in chunks:                 # after each call of the backend's `steps`
        for row in chunk:                # RowChunk: the row, its new frames, ended, ...
            ...

The first chunk is small (`default_first_chunk_steps`: just enough frames for the postnet's
and the vocoder's context plus FIRST_AUDIO_FRAMES of audio), to get audio out early; each later
chunk has twice the steps of the one before, up to `chunk_steps`, for throughput. After each
chunk the rows that ended, and those the caller no longer wants (`leaves`), leave the batch
(the backend's `select`), so the rest decode at the cost of what is left.

Imports no TensorFlow.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence

import numpy as np

CHUNK_STEPS = 64  # the most decoder steps per chunk (chunks double up to it)
FIRST_AUDIO_FRAMES = 8  # mel frames of audio the default first chunk yields
CROSSFADE_SAMPLES = 256  # 16 ms at 16 kHz: vocoder windows are joined over this many samples


def default_first_chunk_steps(decoder, vocoder_context: int, hop_length: int) -> int:
    """Decoder steps of a first chunk that yields FIRST_AUDIO_FRAMES frames of audio."""
    frames = (decoder.postnet_context + vocoder_context + -(-CROSSFADE_SAMPLES // hop_length)
              + FIRST_AUDIO_FRAMES)
    return math.ceil(frames / decoder.reduction_factor)


class RowChunk(NamedTuple):
    """What one chunk of steps gave one row: the caller's `row`, its new decoded frames before
    the postnet [T, n_mels] (T may be 0), whether it ended, its frames so far (its length once
    ended) and whether the stop head ended it (else the length cap)."""

    row: Any
    frames: np.ndarray
    done: bool
    length: int
    by_stop: bool


def decoded_chunks(decoder, state, rows: Sequence[Any], first_chunk_steps: int,
                   chunk_steps: int = CHUNK_STEPS,
                   leaves: Optional[Callable[[Any], bool]] = None) -> Iterator[List[RowChunk]]:
    """[RowChunk of every row still in the batch] after each chunk of decoder steps of the
    decode `state` (started with `decoder.start_batch`, one row per item of `rows`, which are
    the caller's and only handed back). A row leaves the batch once it has ended or
    `leaves(row)` is true; the decode ends when no row is left."""
    if chunk_steps < 1 or first_chunk_steps < 1:
        raise ValueError(f"chunk sizes must be at least one decoder step (got first "
                         f"{first_chunk_steps}, then {chunk_steps})")
    rows = list(rows)
    taken, steps = 0, first_chunk_steps
    while rows:
        state = decoder.steps(state, steps)
        done, frames, by_stop = decoder.batch_progress(state)
        new = decoder.batch_frames(state, taken, int(np.max(frames)))
        yield [RowChunk(row, new[k, : frames[k] - taken], bool(done[k]), int(frames[k]),
                        bool(by_stop[k])) for k, row in enumerate(rows)]
        keep = [k for k, row in enumerate(rows)
                if not done[k] and not (leaves is not None and leaves(row))]
        if not keep:
            return
        if len(keep) < len(rows):
            state = decoder.select(state, keep)
            rows = [rows[k] for k in keep]
        taken = int(frames[keep[0]])  # the rows still running have decoded the same steps
        steps = min(2 * steps, chunk_steps)


def sentence_batches(lengths: Sequence[int], size: int) -> List[List[int]]:
    """The indices of sentences of `lengths` tokens in batches of at most `size`, each of
    neighbours by length (a batch decodes until its longest sentence ends), in as few batches
    as `size` allows."""
    by_length = sorted(range(len(lengths)), key=lambda k: lengths[k])
    count = -(-len(lengths) // size)
    return [by_length[k * len(lengths) // count: (k + 1) * len(lengths) // count]
            for k in range(count)]
