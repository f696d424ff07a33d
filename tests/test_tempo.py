"""MelTempo: the speaking rate of myxtts-serve's `speed`, on mels streamed a chunk at a time."""

import numpy as np
import pytest

from myxtts.inference.tempo import MelTempo


@pytest.mark.parametrize("speed", [0.25, 0.5, 0.9, 1.0, 1.3, 2.0, 3.7, 4.0])
@pytest.mark.parametrize("frames", [1, 2, 5, 97, 200])
def test_chunks_join_to_the_whole_and_scale_the_duration(speed, frames):
    rng = np.random.default_rng(frames)
    mel = rng.random((frames, 4)).astype(np.float32)
    whole = MelTempo(speed).push(mel, True)
    tempo, parts, start = MelTempo(speed), [], 0
    while start < frames:
        size = int(rng.integers(1, 9))
        out = tempo.push(mel[start: start + size], start + size >= frames)
        start += size
        if out is not None:
            parts.append(out)
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    assert abs(len(whole) - frames / speed) <= 1.5


def test_frames_are_interpolated_between_their_neighbours():
    mel = np.arange(10, dtype=np.float32)[:, None]
    np.testing.assert_allclose(MelTempo(0.5).push(mel, True)[:6, 0],
                               [0, 0.5, 1, 1.5, 2, 2.5])
    np.testing.assert_allclose(MelTempo(2.0).push(mel, True)[:, 0], [0, 2, 4, 6, 8])
    np.testing.assert_array_equal(MelTempo(1.0).push(mel, True), mel)


def test_speed_outside_the_range_is_refused():
    for speed in (0.2, 4.5):
        with pytest.raises(ValueError, match="outside 0.25-4.0"):
            MelTempo(speed)
