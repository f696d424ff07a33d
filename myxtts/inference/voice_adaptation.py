"""Adapting the model to a voice: a few steps of fine-tuning on the reference recordings
themselves, their frames and their transcripts fed as in training (teacher forced), so that the
model writes that voice also where its latents alone place it on the nearest training voice. It
needs what each reference says; the voice's latents are computed as without it.

    adapter = VoiceAdapter(model)                       # one per model, made while it holds
                                                        # the checkpoint's weights
    recording = AdaptationRecording(ids, language_id, log_mel)    # the reference, its text
    adapted = adapter.adapt(latents, [recording], steps=ADAPT_STEPS, part="all")
    adapter.use(adapted)         # the model now speaks with the adapted weights
    adapter.use(None)            # and with the checkpoint's again

Which weights move (`part`, ADAPT_PARTS):
  all      every weight the decode reads: text encoder, decoder, postnet (not the speaker
           encoder: the voice's latents are given, made once from the references). The loss is
           training's L1 mel loss before and after the postnet. The strongest voice measured;
           the decode changes with it, and its stop head missed the end of some short
           sentences in one voice.
  postnet  the postnet alone. The decode (how the model reads, its timing, where its stop head
           ends a sentence) stays the checkpoint's exactly: the postnet rewrites the frames the
           decoder wrote and nothing it writes is fed back. The decoder's frames for the
           recordings are computed once; each step runs the postnet alone on them (L1 mel loss
           after the postnet). Its weights (0.35 M of clone_quick's 3 M) fit in a voice file
           (voices.Voice.postnet).
Measured on configs/clone_quick.yaml (docs/history.md, "Which weights adapt"): `all` lifts the
own-vs-other speaker gap further than `postnet`.

The optimiser is Adam, its moments starting at zero for every voice. The recordings go as one
padded batch, so every step sees all of them. `adapt` starts from the checkpoint's weights (also
while another voice's are in use), leaves the model speaking as it did and returns the adapted
values; `use` puts them in. Deterministic: the pass runs with training=False (no dropout; the
prenet's inference masks are fixed).

The defaults (ADAPT_STEPS, ADAPT_LEARNING_RATE) were chosen on configs/clone_quick.yaml's run c34
(docs/history.md, "c34"; docs/cloning.md, "Adapting to the reference").
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

ADAPT_STEPS = 30
ADAPT_LEARNING_RATE = 3e-4
ADAPT_PARTS = ("all", "postnet")
_BETA_1, _BETA_2, _EPSILON = 0.9, 0.999, 1e-8


@dataclasses.dataclass(frozen=True)
class AdaptationRecording:
    """A reference recording as adaptation reads it."""

    ids: Tuple[int, ...]  # token ids of its transcript
    language_id: int
    mel: np.ndarray  # log10 mel float32 [T, n_mels] of the whole recording


@dataclasses.dataclass(frozen=True)
class AdaptedWeights:
    """The weights of `part` after adapting to a voice (VoiceAdapter.adapt)."""

    values: Tuple[np.ndarray, ...]  # in the order of VoiceAdapter.variables(part)
    losses: Tuple[float, ...]  # the mel loss before each step, and after the last
    steps: int
    learning_rate: float
    part: str  # one of ADAPT_PARTS


class VoiceAdapter:
    """Fine-tunes `model` on a voice's reference recordings; see the module docstring."""

    def __init__(self, model):
        self.model = model
        encoder = {id(v) for v in model.speaker_encoder.trainable_variables}
        self._variables = {
            "all": [v for v in model.trainable_variables if id(v) not in encoder],
            "postnet": list(model.postnet.trainable_variables)}
        self._checkpoint = [v.numpy() for v in self._variables["all"]]
        self._index = {id(v): i for i, v in enumerate(self._variables["all"])}
        self._in_use: Optional[Tuple[str, Tuple[np.ndarray, ...]]] = None  # (part, values)
        self._moments: Dict[int, Tuple[tf.Variable, tf.Variable]] = {}
        for variable in self._variables["all"]:
            with tf.device(variable.value.device):  # a keras.Variable's tf.Variable
                self._moments[id(variable)] = (
                    tf.Variable(tf.zeros_like(variable), trainable=False),
                    tf.Variable(tf.zeros_like(variable), trainable=False))
        # traced for the first two batch shapes, then once for recordings of any length
        self._steps = {part: tf.function(lambda batch, t, rate, part=part:
                                         self._update(batch, t, rate, part),
                                         reduce_retracing=True) for part in ADAPT_PARTS}
        self._losses = {part: tf.function(lambda batch, part=part: self._mel_loss(batch, part),
                                          reduce_retracing=True) for part in ADAPT_PARTS}
        self._decode = tf.function(self._decoded, reduce_retracing=True)

    def variables(self, part: str) -> List:
        """The weights `part` moves, in the order of AdaptedWeights.values."""
        if part not in ADAPT_PARTS:
            raise ValueError(f"part {part!r} is not one of {', '.join(ADAPT_PARTS)}")
        return self._variables[part]

    def adapt(self, latents, recordings: Sequence[AdaptationRecording], steps: int = ADAPT_STEPS,
              learning_rate: float = ADAPT_LEARNING_RATE, part: str = "all") -> AdaptedWeights:
        """The weights of `part` after `steps` Adam steps on `recordings` spoken with `latents`
        ([1, L, d], the voice's latents), from the checkpoint's weights; the model speaks as it
        did before (the weights in use are put back)."""
        variables = self.variables(part)
        if not recordings:
            raise ValueError("adapting to a voice needs at least one recording")
        in_use = self._in_use or ("all", None)
        self.use(None)
        batch = self._batch(latents, recordings)
        if part == "postnet":
            batch["mel_before"] = self._decode(batch)
        for variable in variables:
            for moment in self._moments[id(variable)]:
                moment.assign(tf.zeros_like(moment))
        rate = tf.constant(learning_rate, tf.float32)
        losses = [float(self._steps[part](batch, tf.constant(float(t)), rate))
                  for t in range(1, steps + 1)]
        losses.append(float(self._losses[part](batch)))
        adapted = tuple(v.numpy() for v in variables)
        self._restore(variables)
        self.use_values(*in_use)
        return AdaptedWeights(adapted, tuple(losses), steps, learning_rate, part)

    def use(self, adapted: Optional[AdaptedWeights]) -> None:
        """Puts `adapted`'s weights into the model, the checkpoint's everywhere else; None: the
        checkpoint's weights everywhere."""
        if adapted is None:
            self.use_values("all", None)
        else:
            self.use_values(adapted.part, adapted.values)

    def use_values(self, part: str, values: Optional[Sequence[np.ndarray]]) -> None:
        """`use` of adapted weights of `part` (AdaptedWeights.values, or a voice file's postnet;
        None: the checkpoint's)."""
        variables = self.variables(part)
        if self._in_use is not None:
            self._restore(self.variables(self._in_use[0]))
            self._in_use = None
        if values is None:
            return
        if [tuple(v.shape) for v in variables] != [np.shape(v) for v in values]:
            raise ValueError(f"adapted weights of another model: shapes "
                             f"{[np.shape(v) for v in values]}")
        for variable, value in zip(variables, values):
            variable.assign(value)
        self._in_use = (part, tuple(values))

    def _restore(self, variables) -> None:
        """The checkpoint's values back into `variables` (a part's)."""
        for variable in variables:
            variable.assign(self._checkpoint[self._index[id(variable)]])

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

    def _decoded(self, batch):
        """The decoder's frames [B, T, n_mels] for the recordings, teacher forced."""
        return self.model(batch, training=False)["mel_before"]

    def _mel_loss(self, batch, part: str):
        """Mean L1 over the recordings' frames: before and after the postnet (`all`), or after
        it on the decoder's frames computed once (`postnet`)."""
        mask = tf.sequence_mask(batch["mel_lengths"], tf.shape(batch["mel"])[1])
        if part == "postnet":
            outputs = [self.model.postnet(batch["mel_before"], mask)]
        else:
            out = self.model(batch, training=False)
            outputs = [out["mel_before"], out["mel_after"]]
        keep = tf.cast(mask, tf.float32)[..., None]
        count = tf.reduce_sum(keep) * tf.cast(tf.shape(batch["mel"])[2], tf.float32)
        return sum(tf.reduce_sum(tf.abs(tf.cast(mel, tf.float32) - batch["mel"]) * keep)
                   for mel in outputs) / count

    def _update(self, batch, t, rate, part: str):
        variables = self._variables[part]
        with tf.GradientTape() as tape:
            loss = self._mel_loss(batch, part)
        grads = tape.gradient(loss, variables)
        corrected = rate * tf.sqrt(1 - _BETA_2 ** t) / (1 - _BETA_1 ** t)
        for variable, grad in zip(variables, grads):
            if grad is None:  # read by no mel loss (the stop head)
                continue
            first, second = self._moments[id(variable)]
            grad = tf.convert_to_tensor(grad)  # an embedding's IndexedSlices
            first.assign(_BETA_1 * first + (1 - _BETA_1) * grad)
            second.assign(_BETA_2 * second + (1 - _BETA_2) * tf.square(grad))
            variable.assign_sub(corrected * first / (tf.sqrt(second) + _EPSILON))
        return loss
