"""The decode of a checkpoint's XTTSModel as a decoder for myxtts.inference.streaming's driver:
start_decode and decode_steps as (XLA-)compiled functions, the state kept as tensors."""

from __future__ import annotations

import functools
from typing import Tuple

import numpy as np
import tensorflow as tf


class ModelDecoder:
    """The decode of a checkpoint's XTTSModel for `stream_decode`: start_decode and
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

    def start(self, ids, language_id: int, latents):
        padded = -(-len(ids) // self.token_padding) * self.token_padding
        tokens = np.zeros([1, padded], np.int32)
        tokens[0, : len(ids)] = ids
        return self._start(tf.constant(tokens), tf.constant([len(ids)], tf.int32),
                           tf.constant([language_id], tf.int32),
                           tf.convert_to_tensor(latents, tf.float32))

    def steps(self, state, steps: int):
        return self._steps(state, tf.constant(steps, tf.int32))

    def progress(self, state) -> Tuple[bool, int, bool]:
        """(ended, its frames so far (its length once ended), ended by the stop head)."""
        done = bool(state.done[0])
        frames = int(state.lengths[0]) if done else int(state.step) * self.reduction_factor
        return done, frames, bool(state.by_stop[0])

    def frames(self, state, first: int, last: int) -> np.ndarray:
        """Decoded frames [first, last) before the postnet, [last - first, n_mels]."""
        return tf.reshape(state.frames[:, 0], [-1, self.n_mels])[first:last].numpy()

    def postnet(self, mel_before: np.ndarray, first_frame: int, latents) -> np.ndarray:
        """The postnet over a window of decoded frames [T, n_mels] of a decode with the
        speaker latents [1, L, d], as the whole decode outputs it (matched to the reference
        with model.reference_matching)."""
        del first_frame  # neither depends on where a window starts
        return self._postnet(tf.constant(mel_before, tf.float32),
                             tf.convert_to_tensor(latents, tf.float32)).numpy()

    def _postnet_window(self, mel_before, latents):
        """The postnet over decoded frames [T, n_mels], every one valid."""
        mask = tf.ones([1, tf.shape(mel_before)[0]], tf.bool)
        return self.model.reference_matched(self.model.postnet(mel_before[None], mask),
                                            latents)[0]
