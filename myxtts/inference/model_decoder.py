"""The decode of a checkpoint's XTTSModel as a decode backend (myxtts.decoding.backend):
start_decode and decode_steps as (XLA-)compiled functions, the state (xtts.DecodeState) kept as
tensors between calls."""

from __future__ import annotations

import functools
from typing import Sequence, Tuple

import numpy as np
import tensorflow as tf

from myxtts.decoding.backend import (DecodeBackend, padded_length, padded_tokens, step_frames,
                                     step_slice)
from myxtts.models.xtts import batch_axes


class ModelDecoder(DecodeBackend):
    """The decode of a checkpoint's XTTSModel for the chunk scheduler: start_decode and
    decode_steps as (XLA-)compiled functions, the state kept as tensors between calls."""

    def __init__(self, model, max_steps: int, token_padding: int, jit_compile: bool = True):
        self.model = model
        self.reduction_factor = model.reduction_factor
        self.n_mels = model.n_mels
        self.postnet_context = model.postnet.receptive_field
        self.token_padding = token_padding
        self._start = tf.function(functools.partial(model.start_decode, max_steps=max_steps),
                                  jit_compile=jit_compile, reduce_retracing=True)
        self._steps = tf.function(model.decode_steps, jit_compile=jit_compile,
                                  reduce_retracing=True)
        self._postnet = tf.function(self._postnet_window, reduce_retracing=True)

    def start_batch(self, sentences: Sequence[Sequence[int]], language_ids: Sequence[int],
                    latents):
        tokens = padded_tokens(sentences, padded_length(sentences, self.token_padding))
        return self._start(tf.constant(tokens),
                           tf.constant([len(ids) for ids in sentences], tf.int32),
                           tf.constant(list(language_ids), tf.int32),
                           tf.convert_to_tensor(latents, tf.float32))

    def steps(self, state, steps: int):
        return self._steps(state, tf.constant(steps, tf.int32))

    def batch_progress(self, state) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        done = state.done.numpy()
        frames = np.where(done, state.lengths.numpy(), int(state.step) * self.reduction_factor)
        return done, frames, state.by_stop.numpy()

    def batch_frames(self, state, first: int, last: int) -> np.ndarray:
        r = self.reduction_factor
        steps = state.frames[step_slice(first, last, r)].numpy()
        return step_frames(steps, first, last, r, self.n_mels)

    def select(self, state, rows: Sequence[int]):
        rows = tf.constant(list(rows), tf.int32)
        return tf.nest.map_structure(
            lambda value, axis: value if axis is None else tf.gather(value, rows, axis=axis),
            state, batch_axes(state))

    def postnet_batch(self, mel_before: np.ndarray, first_frame: int, latents: np.ndarray,
                      postnet_weights=None) -> np.ndarray:
        """The postnet over windows [B, T, n_mels] of decoded frames, matched to the reference
        with model.reference_matching, as the whole decode outputs it."""
        del first_frame  # neither depends on where a window starts
        if postnet_weights is not None:
            raise ValueError("a checkpoint's decoder runs its own postnet: an adapted voice's "
                             "postnet goes into the model (myxtts.inference.voice_adaptation)")
        return self._postnet(tf.constant(mel_before, tf.float32),
                             tf.convert_to_tensor(latents, tf.float32)).numpy()

    def _postnet_window(self, mel_before, latents):
        """The postnet over decoded frames [B, T, n_mels], every one valid."""
        mask = tf.ones(tf.shape(mel_before)[:2], tf.bool)
        return self.model.reference_matched(self.model.postnet(mel_before, mask), latents)
