"""The decode backend protocol: what a driver (myxtts.decoding.scheduler, and through it
streaming synthesis, the server's engine and the on-device synthesizer) asks of a decoder.

It is batch-first: a decode holds B rows (token sequences, each with its speaker latents) that
advance together a number of decoder steps at a time; after each call the driver reads each
row's progress and new frames, and keeps only the rows still wanted (`select`). Three backends
implement it: myxtts.inference.model_decoder.ModelDecoder (a checkpoint's XTTSModel, XLA),
myxtts.inference.exported_model.ExportedDecoder (a SavedModel's streaming signatures) and
myxtts.lite.synthesizer.LiteDecoder (a LiteRT or ONNX export's parts, 1 or B rows).

Imports no TensorFlow: a backend brings its own runtime.
"""

from __future__ import annotations

import abc
from typing import Sequence, Tuple

import numpy as np


class DecodeBackend(abc.ABC):
    """A decoder the scheduler drives. Its attributes: `reduction_factor` (mel frames per
    decoder step), `n_mels`, `postnet_context` (frames of context each side the postnet reads)
    and `token_padding` (token sequences are padded to a multiple of it); `max_rows`, the most
    rows a batch may hold (None: any number). A state is whatever the backend passes from call
    to call; the driver only hands it back."""

    reduction_factor: int
    n_mels: int
    postnet_context: int
    token_padding: int
    max_rows = None

    @abc.abstractmethod
    def start_batch(self, sentences: Sequence[Sequence[int]], language_ids: Sequence[int],
                    latents):
        """The state of a decode of every token sequence of `sentences` (latents [B, L, d])."""

    @abc.abstractmethod
    def steps(self, state, steps: int):
        """The state after up to `steps` more decoder steps (fewer once every row has ended;
        a backend that steps in whole calls of K may run up to K - 1 more)."""

    @abc.abstractmethod
    def batch_progress(self, state) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ended [B] bool, mel frames so far [B] (a row's length once ended), ended by the stop
        head [B] bool)."""

    @abc.abstractmethod
    def batch_frames(self, state, first: int, last: int) -> np.ndarray:
        """Decoded frames [first, last) of every row before the postnet, [B, last - first,
        n_mels]; a frame past a row's end is padding."""

    @abc.abstractmethod
    def select(self, state, rows: Sequence[int]):
        """The state of rows `rows` only, in that order (finished rows leave a batch)."""

    @abc.abstractmethod
    def postnet_batch(self, mel_before: np.ndarray, first_frame: int, latents: np.ndarray,
                      postnet_weights=None) -> np.ndarray:
        """The postnet over windows [B, T, n_mels] of decoded frames, every one valid, of
        decodes with the speaker latents [B, L, d], as the whole decode outputs it; with
        `postnet_weights` an adapted voice's postnet (backends that can put one in)."""

    def postnet(self, mel_before: np.ndarray, first_frame: int, latents) -> np.ndarray:
        """`postnet_batch` of one window [T, n_mels] of a decode with the latents [1, L, d]."""
        latents = np.reshape(np.asarray(latents, np.float32), (1,) + np.shape(latents)[-2:])
        return self.postnet_batch(np.asarray(mel_before)[None], first_frame, latents)[0]


def step_slice(first: int, last: int, reduction_factor: int) -> slice:
    """The decoder steps that wrote mel frames [first, last)."""
    return slice(first // reduction_factor, -(-last // reduction_factor))


def step_frames(steps: np.ndarray, first: int, last: int, reduction_factor: int,
                n_mels: int) -> np.ndarray:
    """Frames [first, last) of every row, [B, last - first, n_mels], from the steps
    `step_slice(first, last, reduction_factor)` of a slot-major frame buffer, [steps, B,
    reduction_factor * n_mels]."""
    steps = np.asarray(steps)
    frames = steps.transpose(1, 0, 2).reshape(steps.shape[1], -1, n_mels)
    start = first - (first // reduction_factor) * reduction_factor
    return frames[:, start: start + last - first]


def padded_tokens(sentences: Sequence[Sequence[int]], length: int) -> np.ndarray:
    """Token ids [B, length] int32 of `sentences`, each padded with zeros."""
    tokens = np.zeros([len(sentences), length], np.int32)
    for row, ids in enumerate(sentences):
        tokens[row, : len(ids)] = ids
    return tokens


def padded_length(sentences: Sequence[Sequence[int]], padding: int) -> int:
    """The longest sentence's length, rounded up to a multiple of `padding`."""
    return -(-max(len(ids) for ids in sentences) // padding) * padding
