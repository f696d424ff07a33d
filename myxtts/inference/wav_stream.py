"""WAV for a stream of unknown length: one header, then 16-bit PCM as chunks arrive.

A pipe cannot be rewound to fill in the sizes, so the header says 0xFFFFFFFF for the RIFF and
data chunk sizes, as ffmpeg and sox write them to pipes; players (aplay, ffplay, sox) then read
to the end of the stream. When the output is a seekable file (`> out.wav`), WavStreamWriter.finish
writes the real sizes at the end. No TensorFlow (a server and an on-device runtime use it too).
"""

from __future__ import annotations

import io
import os
import struct
from typing import BinaryIO

import numpy as np

UNKNOWN_SIZE = 0xFFFFFFFF


def wav_header(sample_rate: int, channels: int = 1) -> bytes:
    """A 44-byte RIFF/WAVE header for 16-bit PCM of unknown length."""
    block = channels * 2
    return (b"RIFF" + struct.pack("<I", UNKNOWN_SIZE) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate,
                                    sample_rate * block, block, 16)
            + b"data" + struct.pack("<I", UNKNOWN_SIZE))


def pcm16(samples: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as little-endian 16-bit PCM (clipped, rounded)."""
    scaled = np.clip(np.asarray(samples, np.float32), -1.0, 1.0) * 32767.0
    return np.round(scaled).astype("<i2").tobytes()


class WavStreamWriter:
    """Writes the header at once and every chunk as it comes, flushing each; `finish` puts the
    sizes in the header when the output can be rewound."""

    def __init__(self, out: BinaryIO, sample_rate: int):
        self.out = out
        self.samples = 0
        try:
            self.start = out.tell() if out.seekable() else None
        except (OSError, ValueError, io.UnsupportedOperation):
            self.start = None
        out.write(wav_header(sample_rate))
        out.flush()

    def write(self, chunk: np.ndarray) -> None:
        self.out.write(pcm16(chunk))
        self.out.flush()
        self.samples += len(chunk)

    def finish(self) -> None:
        """When the output is a seekable file, the RIFF and data sizes of what was written
        (a pipe keeps 0xFFFFFFFF, which players read to the end)."""
        data = 2 * self.samples
        if self.start is None or data + 36 > UNKNOWN_SIZE:
            return
        end = self.out.tell()
        self.out.seek(self.start + 4)
        self.out.write(struct.pack("<I", 36 + data))
        self.out.seek(self.start + 40)
        self.out.write(struct.pack("<I", data))
        self.out.seek(end, os.SEEK_SET)
        self.out.flush()
