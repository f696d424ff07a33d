"""Adapting the model to a voice: a few steps of fine-tuning on the reference recordings
themselves, their frames and their transcripts fed as in training (teacher forced), so that the
model writes that voice also where its latents alone place it on the nearest training voice.
It needs what each reference says; the voice's latents are computed as without it.

    adapter = VoiceAdapter(model)                       # one per model
    recording = AdaptationRecording(ids, language_id, log_mel)    # the reference, its text
    adapted = adapter.adapt(latents, [recording], steps=ADAPT_STEPS)
    adapter.use(adapted)         # the model now speaks with the adapted weights
    adapter.use(None)            # and with the checkpoint's again

Every trainable weight the teacher-forced pass reads moves (the speaker encoder's does not: the
voice's latents are given, made once from the references). The loss is training's L1 mel loss
before and after the postnet; the optimiser is Adam, its moments starting at zero for every
voice. The recordings go as one padded batch, so every step sees all of them. `adapt` leaves the
model as it found it and returns the adapted values; `use` puts them in. Deterministic: the
pass runs with training=False (no dropout; the prenet's inference masks are fixed).

The defaults (ADAPT_STEPS, ADAPT_LEARNING_RATE) were chosen on configs/clone_quick.yaml's run c34
(docs/results.md, "c34"; docs/cloning.md, "Adapting to the reference").
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

ADAPT_STEPS = 30
ADAPT_LEARNING_RATE = 3e-4
_BETA_1, _BETA_2, _EPSILON = 0.9, 0.999, 1e-8


@dataclasses.dataclass(frozen=True)
class AdaptationRecording:
    """A reference recording as adaptation reads it."""

    ids: Tuple[int, ...]  # token ids of its transcript
    language_id: int
    mel: np.ndarray  # log10 mel float32 [T, n_mels] of the whole recording


@dataclasses.dataclass(frozen=True)
class AdaptedWeights:
    """The model's trainable weights after adapting to a voice (VoiceAdapter.adapt)."""

    values: Tuple[np.ndarray, ...]  # in the order of model.trainable_variables
    losses: Tuple[float, ...]  # the mel loss before each step, and after the last
    steps: int
    learning_rate: float


class VoiceAdapter:
    """Fine-tunes `model` on a voice's reference recordings; see the module docstring."""

    def __init__(self, model):
        self.model = model
        self.variables = list(model.trainable_variables)
        self._checkpoint_values: Optional[List[np.ndarray]] = None
        self._moments = []
        for variable in self.variables:
            with tf.device(variable.value.device):  # a keras.Variable's tf.Variable
                self._moments.append((tf.Variable(tf.zeros_like(variable), trainable=False),
                                      tf.Variable(tf.zeros_like(variable), trainable=False)))
        # traced for the first two batch shapes, then once for recordings of any length
        self._step = tf.function(self._update, reduce_retracing=True)
        self._loss = tf.function(self._mel_loss, reduce_retracing=True)

    def adapt(self, latents, recordings: Sequence[AdaptationRecording], steps: int = ADAPT_STEPS,
              learning_rate: float = ADAPT_LEARNING_RATE) -> AdaptedWeights:
        """The weights after `steps` Adam steps on `recordings` spoken with `latents`
        ([1, L, d], the voice's latents), from the checkpoint's weights (also while another
        voice's are in use); the model's weights are left as they were."""
        if not recordings:
            raise ValueError("adapting to a voice needs at least one recording")
        batch = self._batch(latents, recordings)
        before = [v.numpy() for v in self.variables]
        if self._checkpoint_values is not None:  # another voice's weights are in: start anew
            for variable, value in zip(self.variables, self._checkpoint_values):
                variable.assign(value)
        for first, second in self._moments:
            first.assign(tf.zeros_like(first))
            second.assign(tf.zeros_like(second))
        rate = tf.constant(learning_rate, tf.float32)
        losses = [float(self._step(batch, tf.constant(float(t)), rate))
                  for t in range(1, steps + 1)]
        losses.append(float(self._loss(batch)))
        adapted = tuple(v.numpy() for v in self.variables)
        for variable, value in zip(self.variables, before):
            variable.assign(value)
        return AdaptedWeights(adapted, tuple(losses), steps, learning_rate)

    def use(self, adapted: Optional[AdaptedWeights]) -> None:
        """Puts `adapted`'s weights into the model; None puts back the weights it had when the
        first adapted ones went in (the checkpoint's)."""
        if adapted is None:
            if self._checkpoint_values is not None:
                for variable, value in zip(self.variables, self._checkpoint_values):
                    variable.assign(value)
            return
        if self._checkpoint_values is None:
            self._checkpoint_values = [v.numpy() for v in self.variables]
        for variable, value in zip(self.variables, adapted.values):
            variable.assign(value)

    def _batch(self, latents, recordings: Sequence[AdaptationRecording]) -> dict:
        r = self.model.reduction_factor
        n = len(recordings)
        frames = max(len(rec.mel) for rec in recordings)
        tokens = max(len(rec.ids) for rec in recordings)
        mel = np.zeros([n, -(-frames // r) * r, recordings[0].mel.shape[1]], np.float32)
        ids = np.zeros([n, tokens], np.int32)
        for i, rec in enumerate(recordings):
            mel[i, :len(rec.mel)] = rec.mel
            ids[i, :len(rec.ids)] = rec.ids
        latents = tf.convert_to_tensor(latents, tf.float32)
        return {"tokens": tf.constant(ids),
                "token_lengths": tf.constant([len(rec.ids) for rec in recordings], tf.int32),
                "language_ids": tf.constant([rec.language_id for rec in recordings], tf.int32),
                "mel": tf.constant(mel),
                "mel_lengths": tf.constant([len(rec.mel) for rec in recordings], tf.int32),
                "speaker_latents": tf.tile(latents, [n, 1, 1])}

    def _mel_loss(self, batch):
        out = self.model(batch, training=False)
        mask = tf.sequence_mask(batch["mel_lengths"], tf.shape(batch["mel"])[1],
                                tf.float32)[..., None]
        count = tf.reduce_sum(mask) * tf.cast(tf.shape(batch["mel"])[2], tf.float32)
        return sum(tf.reduce_sum(tf.abs(tf.cast(out[k], tf.float32) - batch["mel"]) * mask)
                   for k in ("mel_before", "mel_after")) / count

    def _update(self, batch, t, rate):
        with tf.GradientTape() as tape:
            loss = self._mel_loss(batch)
        grads = tape.gradient(loss, self.variables)
        corrected = rate * tf.sqrt(1 - _BETA_2 ** t) / (1 - _BETA_1 ** t)
        for variable, grad, (first, second) in zip(self.variables, grads, self._moments):
            if grad is None:  # the speaker encoder: the latents are given
                continue
            grad = tf.convert_to_tensor(grad)
            first.assign(_BETA_1 * first + (1 - _BETA_1) * grad)
            second.assign(_BETA_2 * second + (1 - _BETA_2) * tf.square(grad))
            variable.assign_sub(corrected * first / (tf.sqrt(second) + _EPSILON))
        return loss
