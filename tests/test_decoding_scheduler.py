"""The one chunk scheduler (myxtts.decoding.scheduler) over a numpy decode backend whose rows
end at known steps: chunk sizes, rows leaving the batch, and the frames each row gets."""

import subprocess
import sys

import numpy as np
import pytest

from myxtts.decoding import scheduler
from myxtts.decoding.backend import DecodeBackend

R, N_MELS = 2, 3


class _Counting(DecodeBackend):
    """Row k of a decode ends (by the stop head) after `ends[k]` mel frames; frame f of the row
    that started as number k holds 1000 k + f. Records each `steps` call and each `select`."""

    reduction_factor, n_mels, postnet_context, token_padding = R, N_MELS, 1, 1

    def __init__(self):
        self.calls, self.selected = [], []

    def start_batch(self, sentences, language_ids, latents):
        return {"step": 0, "ids": [ids[0] for ids in sentences],
                "ends": [len(ids) for ids in sentences]}

    def steps(self, state, steps):
        self.calls.append(steps)
        longest = max(-(-end // R) for end in state["ends"])
        return dict(state, step=min(state["step"] + steps, max(longest, state["step"])))

    def batch_progress(self, state):
        reached = state["step"] * R
        done = np.array([end <= reached for end in state["ends"]])
        frames = np.where(done, state["ends"], reached)
        return done, frames, done.copy()

    def batch_frames(self, state, first, last):
        frames = np.arange(first, last, dtype=np.float32)
        return np.stack([np.repeat((1000 * ident + frames)[:, None], N_MELS, 1)
                         for ident in state["ids"]])

    def select(self, state, rows):
        self.selected.append(list(rows))
        return dict(state, ids=[state["ids"][k] for k in rows],
                    ends=[state["ends"][k] for k in rows])

    def postnet_batch(self, mel_before, first_frame, latents, postnet_weights=None):
        return mel_before


def _decode(ends, first=2, chunk=8, leaves=None):
    """{row: (joined frames, length, by stop)} and the backend of a decode of rows ending after
    `ends` frames."""
    backend = _Counting()
    sentences = [[k] * end for k, end in enumerate(ends)]
    state = backend.start_batch(sentences, [0] * len(ends), None)
    got = {k: [] for k in range(len(ends))}
    ended = {}
    for chunk_rows in scheduler.decoded_chunks(backend, state, list(range(len(ends))), first,
                                               chunk, leaves):
        for row in chunk_rows:
            got[row.row].append(row.frames)
            if row.done:
                ended[row.row] = (row.length, row.by_stop)
    return {k: np.concatenate(v) for k, v in got.items()}, ended, backend


def test_chunks_start_small_and_double_up_to_the_chunk_size():
    _, _, backend = _decode([100], first=3, chunk=10)
    assert backend.calls == [3, 6, 10, 10, 10, 10, 10]  # 50 steps


def test_each_row_gets_its_own_frames_once_and_leaves_when_it_ends():
    ends = [7, 30, 15, 2]  # row 0 ends mid-step, row 3 inside the first chunk
    frames, ended, backend = _decode(ends)
    for k, end in enumerate(ends):
        np.testing.assert_array_equal(frames[k][:, 0], 1000 * k + np.arange(end))
        assert ended[k] == (end, True)
    # rows leave in the order they end; the batch shrinks to the rows still running
    assert backend.selected == [[0, 1, 2], [1, 2], [0]]  # indices into the batch as it is
    alone = _decode([30])[0][0]  # the longest row alone gets the same frames
    np.testing.assert_array_equal(frames[1] - 1000, alone)


def test_a_row_the_caller_no_longer_wants_leaves_and_the_others_are_unchanged():
    wanted = {0, 2}
    frames, ended, backend = _decode([40, 40, 40], leaves=lambda row: row not in wanted)
    assert backend.selected == [[0, 2]]
    assert 1 not in ended and len(frames[1]) == 2 * R  # only the first chunk
    for k in wanted:
        np.testing.assert_array_equal(frames[k][:, 0], 1000 * k + np.arange(40))


def test_a_chunk_of_no_steps_is_refused():
    with pytest.raises(ValueError, match="at least one decoder step"):
        _decode([10], first=0)


def test_the_decode_runtime_imports_no_tensorflow():
    code = ("import sys, myxtts.decoding.scheduler, myxtts.decoding.backend, "
            "myxtts.inference.streaming; print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
