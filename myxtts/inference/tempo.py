"""Speaking rate: a log-mel's frames resampled in time, a chunk at a time, before the vocoder.

Speed s plays output frame j from input position j * s (linear interpolation between the two
frames around it), so s = 2 halves the duration and s = 0.5 doubles it while the vocoder keeps
the pitch the frames describe. It runs on the streamed mel (myxtts.serving) as well as on a
whole one: the chunks of `push` join to the same frames as one call over the whole input.
No TensorFlow.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

MIN_SPEED, MAX_SPEED = 0.25, 4.0


class MelTempo:
    """`push(frames [n, n_mels], final)` → the output frames that are final now."""

    def __init__(self, speed: float):
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed {speed} is outside {MIN_SPEED}-{MAX_SPEED}")
        self.speed = float(speed)
        self.buffer: Optional[np.ndarray] = None  # input frames [base, base + len(buffer))
        self.base = 0
        self.emitted = 0  # output frames given

    def push(self, frames: Optional[np.ndarray], final: bool) -> Optional[np.ndarray]:
        if frames is not None and len(frames):
            frames = np.asarray(frames, np.float32)
            self.buffer = frames if self.buffer is None else \
                np.concatenate([self.buffer, frames])
        if self.buffer is None:
            return None
        if self.speed == 1.0:
            out, self.buffer = self.buffer, None
            self.base += len(out)
            return out
        total = self.base + len(self.buffer)
        # Output frame j reads input frames floor(j * s) and the one after it; the last input
        # frame counts as its own successor once the input is final.
        last_position = total - 1 if final else total - 2
        count = int(np.floor(last_position / self.speed)) + 1 if last_position >= 0 else 0
        if final:
            count = max(count, int(round(total / self.speed)))
        positions = np.arange(self.emitted, max(count, self.emitted)) * self.speed
        positions = np.minimum(positions, total - 1) - self.base
        low = np.floor(positions).astype(np.int64)
        high = np.minimum(low + 1, len(self.buffer) - 1)
        weight = (positions - low)[:, None].astype(np.float32)
        out = self.buffer[low] * (1.0 - weight) + self.buffer[high] * weight
        self.emitted = max(count, self.emitted)
        # Input frames before the next output's position are read no more.
        keep = min(int(np.floor(self.emitted * self.speed)) - self.base, len(self.buffer))
        if keep > 0:
            self.buffer, self.base = self.buffer[keep:], self.base + keep
        return out if len(out) else None
