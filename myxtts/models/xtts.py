"""XTTSModel: the XTTS-style acoustic model (text + speaker reference → log10 mel).

Public API (docs/model.md has the diagram and the contracts):

    model = XTTSModel(config.model, vocab_size, num_languages, n_mels)   # weights built here
    out = model(batch, training=...)        # teacher forced; batch as in docs/architecture.md
        (batch["speaker_latents"], float32 [B, L, d] as from speaker_latents, replaces
        "ref_mel"/"ref_lengths": a voice's latents given, as inference.voice_adaptation does)
        out["mel_before"]  float32 [B, T_mel, n_mels]  decoder output (values past mel_lengths
                                                       are unspecified)
        out["mel_after"]   float32 [B, T_mel, n_mels]  + postnet residual (0 past mel_lengths)
        out["stop_logits"] float32 [B, T_mel]          PER FRAME; frame mel_lengths-1 is the stop
        out["alignments"]  float32 [B, T_mel / r, T_text]  text cross-attention of the last
                                                       decoder block, mean over heads
        out["text_attention"] float32 [B, layers*H, T_mel / r, T_text]  every block's text
                                                       cross-attention heads (guided loss)
    with model.reading_probe also (models/reading_probe.py)
        out["reading_logits"] float32 [B, T_mel, vocab]  the probe's CTC logits on the recorded
                                                       mel (id 0, padding, is the blank)
        out["reading_logits_output"] float32 [B, T_mel, vocab]  the same on mel_after, with no
                                                       gradient into the probe's weights
    latents = model.speaker_latents(ref_mel, ref_lengths, training=False)   # float32 [B, L, d]
        L = config.speaker_latent_rows: the perceiver's latents, and with model.reference_spectrum
        the reference's spectrum as one more row (`split_latents`); the decoder then reads and
        writes frames relative to that spectrum; with model.reference_statistics its spread
        as one more, and the decode maps every written frame to both (`_mapped`); with
        model.reference_matching its first speech frames as REFERENCE_MATCHING_FRAMES more
        (`reference_frames`), which every speech frame of the postnet's output moves toward
        (`reference_matched`)
    out = model.generate(tokens, token_lengths, language_ids, latents, max_steps=None)
        out["mel"]         float32 [B, max_steps * r, n_mels]  postnet output, 0 past mel_lengths
        out["mel_lengths"] int32   [B]
        out["alignments"]  float32 [B, max_steps, T_text]
        out["stopped"]     bool    [B]  True where the stop head ended the item (False: the
                                        length cap did)

`generate` also takes keyword-only `stop_threshold`, `use_cache` (False = full-recompute
reference path) and `jit_compile`. `decode` is the graph-building body of `generate` for callers
that wrap it in their own tf.function (the SavedModel exporter). Both drive one decode API:

    state = model.start_decode(tokens, token_lengths, language_ids, latents, max_steps)
    state = model.decode_steps(state, n, stop_threshold)   # up to n more steps; repeatable
    out = model.decoded(state)                             # generate's outputs so far
    model.postnet.receptive_field                          # frames of context a chunk needs
    model.reference_matched(mel, latents)                  # a postnet window's frames, matched

A DecodeState holds the step, the KV caches, the frame and alignment buffers, which items are
done and their lengths (every field a tensor), so a driver can run the decode a few steps at a
time across tf.function calls (streaming) or hand the state through a signature. The output length of `generate`
is static (max_steps * r, max_steps defaulting to model.max_decoder_steps) so it compiles with XLA
and exports with fixed shapes; slice each item with mel_lengths.

All weights are created in the constructor, so constructing the model inside
`with tf.device(...)` puts every variable there.
"""

from __future__ import annotations

import functools
import math
from typing import Dict, NamedTuple, Optional

import keras
import tensorflow as tf

from myxtts.config import (REFERENCE_MATCHING_FRAMES, REFERENCE_MATCHING_NEIGHBOURS,
                           ModelConfig)
from myxtts.models.decoder import TEXT, LATENTS, MelDecoder, Postnet, previous_step_inputs
from myxtts.models.encoders import REFERENCE_FRAME_PAD, SpeakerEncoder, TextEncoder
from myxtts.models.layers import (apply_norm, fold_seed, forward_initial_state,
                                  in_static_context, in_xla_context, key_padding_mask,
                                  length_mask, modulate, norm_weights, slot_buffer,
                                  window_mask, write_slot)
from myxtts.models.reading_probe import PROBE_CHANNELS, ReadingProbe


class _FunctionCache:
    """Compiled generate functions by options; a plain object so Keras/TF tracking ignores it."""

    def __init__(self):
        self.functions = {}


class DecodeState(NamedTuple):
    """Everything an autoregressive decode carries from one step to the next
    (`XTTSModel.start_decode` → `decode_steps` → ... → `decoded`). Every field is a tensor or a
    tuple of tensors, so a state passes through tf.while_loop, between tf.function calls and
    through SavedModel signatures. S = the decode's maximum steps, B = items, T = text tokens,
    H heads of Dh dimensions, r = model.reduction_factor."""

    step: tf.Tensor  # int32 []: decoder steps run so far (the next slot written)
    frames: tf.Tensor  # float32 [S, B, r * n_mels]: each step's frames before the postnet
    alignments: tf.Tensor  # float32 [S, B, T]: each step's text attention (last block's mean)
    done: tf.Tensor  # bool [B]: the item has ended
    lengths: tf.Tensor  # int32 [B]: mel frames of an ended item (0 while it runs)
    by_stop: tf.Tensor  # bool [B]: the stop head ended it (not the length cap)
    peaks: tf.Tensor  # int32 [B]: furthest text position attended (the attention window)
    previous: tf.Tensor  # float32 [B, r * n_mels]: the last step's frames, the next input
    #   (relative to `offset`)
    offset: tf.Tensor  # float32 [B, r * n_mels]: the reference spectrum added to every step's
    #   frames (model.reference_spectrum; zeros without)
    caches: tuple  # per block: (keys [S, B, H, Dh], values, forward attention [B, H, T])
    memory: tuple  # per block: ((latent keys, values), (text keys, values)), [B, H, L|T, Dh]
    text_mask: tf.Tensor  # bool [B, 1, 1, T]: the text's valid tokens
    limit: tf.Tensor  # int32 [B]: the item's length cap in steps
    norms: tuple  # model.voice_norms: (float32 [B, N, 2, d],) the scale and shift of each of
    #   the decoder's N norms for this voice; () without (LiteRT refuses empty tensors)
    statistics: tuple  # model.reference_statistics: float32 (the reference's spread [B, n],
    #   speech frames written [B, 1], their sum [B, n], their sum of squares [B, n])
    #   (`_mapped`); () without
    matching: tuple  # model.reference_matching: (the reference's speech frames, float32
    #   [B, REFERENCE_MATCHING_FRAMES, n],) (`decoded` matches the postnet's output to them);
    #   () without

    def to_tensors(self) -> Dict[str, tf.Tensor]:
        """The state as flat named tensors (SavedModel signature inputs and outputs): the
        fields by name, the per-block tuples as `caches_<block>_<k>` and
        `memory_<block>_<latents 0|text 1>_<keys 0|values 1>`."""
        flat = {}
        for name, value in self._asdict().items():
            if isinstance(value, tuple):
                for path, tensor in _flatten_with_paths(value):
                    flat[f"{name}_{path}"] = tensor
            else:
                flat[name] = value
        return flat

    @classmethod
    def from_tensors(cls, flat: Dict[str, tf.Tensor]) -> "DecodeState":
        """The inverse of `to_tensors`."""
        fields = {}
        for name in cls._fields:
            if name in flat:
                fields[name] = flat[name]
            else:
                fields[name] = _unflatten_paths({key[len(name) + 1:]: value
                                                 for key, value in flat.items()
                                                 if key.startswith(name + "_")})
        return cls(**fields)


def _flatten_with_paths(value, prefix: str = ""):
    """[("0_1", tensor), ...] of nested tuples of tensors."""
    if not isinstance(value, tuple):
        return [(prefix, value)]
    return [item for i, element in enumerate(value)
            for item in _flatten_with_paths(element, f"{prefix}_{i}" if prefix else str(i))]


def _unflatten_paths(flat: Dict[str, tf.Tensor]) -> tuple:
    """Nested tuples from {"0_1": tensor, ...} (`_flatten_with_paths`'s inverse)."""
    groups: Dict[int, Dict[str, tf.Tensor]] = {}
    leaves: Dict[int, tf.Tensor] = {}
    for path, tensor in flat.items():
        head, _, rest = path.partition("_")
        if rest:
            groups.setdefault(int(head), {})[rest] = tensor
        else:
            leaves[int(head)] = tensor
    return tuple(leaves[i] if i in leaves else _unflatten_paths(groups[i])
                 for i in range(len(leaves) + len(groups)))


def _open(value: tf.Tensor, axis: int = 0) -> tf.TensorShape:
    """The shape of `value` with dimension `axis` (the batch) left unknown."""
    dims = value.shape.as_list()
    if dims:
        dims[axis] = None
    return tf.TensorShape(dims)


def batch_axes(state: DecodeState) -> DecodeState:
    """Each state tensor's item axis, as a DecodeState of ints (None for the step, which all
    items share): axis 1 of the slot-major buffers (frames, alignments, the caches' keys and
    values), 0 elsewhere."""
    slot_major = {"frames", "alignments"}
    return DecodeState(**{
        name: (None if name == "step" else 1 if name in slot_major else
               tuple((1, 1, 0) for _ in value) if name == "caches" else
               tf.nest.map_structure(lambda _: 0, value))
        for name, value in state._asdict().items()})


def _invariants(state: DecodeState) -> DecodeState:
    """tf.while_loop shape invariants of a DecodeState: the batch dimension is left open
    (`batch_axes`): a retraced function (other text lengths) may see it unknown in the body
    while the initial values know it, which tf.while_loop rejects."""
    return tf.nest.map_structure(
        lambda value, axis: tf.TensorShape([]) if axis is None else _open(value, axis),
        state, batch_axes(state))


class XTTSModel(keras.Model):
    def __init__(self, config: ModelConfig, vocab_size: int, num_languages: int, n_mels: int,
                 **kwargs):
        kwargs.setdefault("name", "xtts")
        super().__init__(**kwargs)
        self.config = config
        self.n_mels = n_mels
        self.reduction_factor = config.reduction_factor
        self.stop_threshold = config.stop_threshold
        self.max_decoder_steps = config.max_decoder_steps
        self.max_frames_per_token = config.max_frames_per_token
        self.gradient_checkpointing = config.gradient_checkpointing
        self.text_encoder = TextEncoder(config, vocab_size, num_languages, name="text_encoder")
        self.speaker_encoder = SpeakerEncoder(config, n_mels, name="speaker_encoder")
        self.decoder = MelDecoder(config, n_mels, name="decoder")
        self.postnet = Postnet(config, n_mels, name="postnet")
        self.reading_probe = (ReadingProbe(vocab_size, n_mels, PROBE_CHANNELS,
                                           name="reading_probe")
                              if config.reading_probe else None)
        self.seed_generator = keras.random.SeedGenerator(name="dropout_seed")
        self._generate_cache = _FunctionCache()
        self._build_weights()

    def _build_weights(self):
        r, n = self.reduction_factor, self.n_mels
        one = tf.ones([1], tf.int32)
        self({"tokens": tf.ones([1, 1], tf.int32), "token_lengths": one,
              "language_ids": tf.zeros([1], tf.int32), "mel": tf.zeros([1, r, n]),
              "mel_lengths": one * r, "ref_mel": tf.zeros([1, 1, n]), "ref_lengths": one},
             training=False)

    def _dropout_seed(self, training: bool) -> Optional[tf.Tensor]:
        if not training:
            return None
        return keras.random.randint((2,), 0, 2 ** 31 - 1, seed=self.seed_generator,
                                    dtype="int32")

    # ---- teacher-forced training pass ------------------------------------------------------
    def call(self, batch, training=False) -> Dict[str, tf.Tensor]:
        r, n = self.reduction_factor, self.n_mels
        # Under a tf.distribute strategy the training step passes each replica its own seed
        # (myxtts/training/mirrored_step.py): a replica cannot advance the seed generator.
        seed = batch["dropout_seed"] if training and "dropout_seed" in batch else \
            self._dropout_seed(training)
        tokens, token_lengths = batch["tokens"], tf.cast(batch["token_lengths"], tf.int32)
        text = self.text_encoder(tokens, token_lengths, batch["language_ids"],
                                 seed=fold_seed(seed, 0), training=training)
        voice_rows = batch.get("speaker_latents")
        if voice_rows is None:
            voice_rows = self.speaker_encoder(batch["ref_mel"], tf.cast(batch["ref_lengths"],
                                                                        tf.int32),
                                              seed=fold_seed(seed, 1), training=training)
        latents, spectrum, _ = self.split_latents(voice_rows)
        mel = batch["mel"]
        b, t = tf.shape(mel)[0], tf.shape(mel)[1]
        text_mask = key_padding_mask(token_lengths, tf.shape(tokens)[1])
        frames, stop, text_attention = self.decoder(
            previous_step_inputs(_relative(mel, spectrum), r), latents, text, text_mask,
            seed=fold_seed(seed, 2), training=training)
        mel_before = _absolute(tf.reshape(frames, [b, t, n]), spectrum)
        mel_after = self.postnet(mel_before, length_mask(batch["mel_lengths"], t))
        outputs = {"mel_before": mel_before, "mel_after": mel_after,
                   "stop_logits": tf.reshape(stop, [b, t]),
                   "alignments": tf.reduce_mean(text_attention[:, -self.config.num_heads:],
                                                axis=1),
                   "text_attention": text_attention}
        if self.reading_probe is not None:
            outputs["reading_logits"] = self.reading_probe(mel)
            outputs["reading_logits_output"] = self.reading_probe(mel_after, frozen=True)
        return outputs

    def speaker_latents(self, ref_mel, ref_lengths, training=False) -> tf.Tensor:
        """Reference log10 mel [B, T_ref, n_mels] → float32 latents [B, L, d_model]
        (L = config.speaker_latent_rows)."""
        latents = self.speaker_encoder(ref_mel, tf.cast(ref_lengths, tf.int32),
                                       seed=self._dropout_seed(training), training=training)
        return tf.cast(latents, tf.float32)

    def split_latents(self, latents):
        """Speaker latents [B, speaker_latent_rows, d] → (the perceiver's [B, L, d], the
        reference spectrum float32 [B, n_mels] or None without model.reference_spectrum, the
        reference's spread float32 [B, n_mels] or None without model.reference_statistics)."""
        m = self.config
        rows = [None, None]
        for i, on in enumerate((m.reference_spectrum, m.reference_statistics)):
            if on:
                rows[i] = tf.cast(latents[:, m.num_speaker_latents + i, :self.n_mels],
                                  tf.float32)
        return latents[:, :self.config.num_speaker_latents], rows[0], rows[1]

    def pooled_latents(self, latents) -> tf.Tensor:
        """The speaker latents [K, L, d] of K references of one voice as one voice's [1, L, d]
        (eager): the mean of every row, but with model.reference_matching the references'
        frame rows are pooled, not averaged: their speech frames, evenly thinned to
        REFERENCE_MATCHING_FRAMES when there are more."""
        latents = tf.convert_to_tensor(latents, tf.float32)
        mean = tf.reduce_mean(latents, axis=0, keepdims=True)
        if not self.config.reference_matching:
            return mean
        first = latents.shape[1] - REFERENCE_MATCHING_FRAMES
        rows = tf.reshape(latents[:, first:], [-1, latents.shape[-1]])
        rows = tf.boolean_mask(rows, tf.reduce_mean(rows[:, :self.n_mels], axis=-1)
                               > REFERENCE_FRAME_PAD / 2)
        count = int(rows.shape[0])
        if count > REFERENCE_MATCHING_FRAMES:
            rows = tf.gather(rows, [i * count // REFERENCE_MATCHING_FRAMES
                                    for i in range(REFERENCE_MATCHING_FRAMES)])
        pad = tf.concat([tf.fill([1, self.n_mels], REFERENCE_FRAME_PAD),
                         tf.zeros([1, latents.shape[-1] - self.n_mels])], axis=1)
        rows = tf.concat([rows, tf.tile(pad, [REFERENCE_MATCHING_FRAMES - rows.shape[0], 1])],
                         axis=0)
        return tf.concat([mean[:, :first], rows[None]], axis=1)

    def reference_matched(self, mel, latents, valid=None):
        """float32 [B, T, n_mels]: the postnet's output `mel` (of a decode with the speaker
        latents [B, L, d]) as the decode outputs it: with model.reference_matching each speech
        frame moved that share toward its nearest reference frames (`_matched`; frames where
        `valid` [B, T] is False left alone), else as it is. Frame by frame, so a window of the
        postnet's output matches as the whole mel does."""
        if not self.config.reference_matching:
            return mel
        spectrum = self.split_latents(tf.cast(latents, self.compute_dtype))[1]
        return _matched(mel, spectrum, self.reference_frames(latents),
                        self.config.reference_matching, valid)

    def reference_frames(self, latents):
        """float32 [B, REFERENCE_MATCHING_FRAMES, n_mels]: the reference speech frames the
        speaker latents carry with model.reference_matching (`encoders.reference_frames`)."""
        first = (self.config.num_speaker_latents + int(self.config.reference_spectrum)
                 + int(self.config.reference_statistics))
        return tf.cast(latents[:, first:first + REFERENCE_MATCHING_FRAMES, :self.n_mels],
                       tf.float32)

    # ---- inference ------------------------------------------------------------------------
    def generate(self, tokens, token_lengths, language_ids, latents, max_steps=None, *,
                 stop_threshold=None, use_cache=True, jit_compile=False):
        """Autoregressive decode in a (cached) tf.function; see the module docstring."""
        max_steps = int(max_steps or self.max_decoder_steps)
        threshold = float(self.stop_threshold if stop_threshold is None else stop_threshold)
        if jit_compile and not use_cache:
            raise ValueError("The full-recompute path grows its input each step and cannot be "
                             "XLA-compiled; use use_cache=True with jit_compile=True.")
        key = (max_steps, threshold, use_cache, jit_compile)
        fn = self._generate_cache.functions.get(key)
        if fn is None:
            fn = tf.function(functools.partial(self.decode, max_steps=max_steps,
                                               stop_threshold=threshold, use_cache=use_cache),
                             jit_compile=jit_compile, reduce_retracing=True)
            self._generate_cache.functions[key] = fn
        return fn(tokens, token_lengths, language_ids, latents)

    def decode(self, tokens, token_lengths, language_ids, latents, max_steps: int,
               stop_threshold: float, use_cache: bool = True) -> Dict[str, tf.Tensor]:
        """Graph body of `generate`; call it inside a tf.function. The cached decode is
        `start_decode` + `decode_steps` until every item ended + `decoded`; use_cache=False is
        the full-recompute reference (`_reference_decode`) the tests and the decode benchmark
        compare the cache with.

        Item b stops after the first frame whose stop probability exceeds `stop_threshold`, or
        after ceil(token_lengths[b] * max_frames_per_token / r) steps, or after max_steps steps.
        With model.decode_attention_window = w > 0, every text cross-attention of step s may
        only look at tokens [p - 1, p + w], p being the peak of step s-1's alignment (forced
        monotonic: p never moves back), so the decode reads the text in order.
        """
        if not use_cache:
            return self._reference_decode(tokens, token_lengths, language_ids, latents,
                                          max_steps, stop_threshold)
        state = self.start_decode(tokens, token_lengths, language_ids, latents, max_steps)
        return self.decoded(self.decode_steps(state, max_steps, stop_threshold))

    # ---- the decode as explicit state and steps ----------------------------------------------
    def start_decode(self, tokens, token_lengths, language_ids, latents,
                     max_steps: int) -> "DecodeState":
        """Encodes the text, projects the text and the speaker latents for every block's
        cross-attention and allocates the buffers of a decode of at most `max_steps` steps;
        no step is run yet."""
        r, n = self.reduction_factor, self.n_mels
        tokens = tf.convert_to_tensor(tokens, tf.int32)
        token_lengths = tf.cast(token_lengths, tf.int32)
        b, t_text = tf.shape(tokens)[0], tf.shape(tokens)[1]
        matching = ((self.reference_frames(latents),) if self.config.reference_matching
                    else ())
        latents, spectrum, spread = self.split_latents(tf.cast(latents, self.compute_dtype))
        offset = (tf.zeros([b, r * n]) if spectrum is None else tf.tile(spectrum, [1, r]))
        statistics = _start_statistics(spread) if self.config.reference_statistics else ()
        text = self.decoder.condition_text(
            self.text_encoder(tokens, token_lengths, tf.cast(language_ids, tf.int32)), latents)
        blocks = self.decoder.transformer.blocks
        heads = blocks[0].self_attention
        cache_shape = [b, heads.num_heads, heads.head_dim]
        forward = forward_initial_state(b, heads.num_heads, t_text)
        limit = tf.cast(tf.math.ceil(tf.cast(token_lengths, tf.float32)
                                     * self.max_frames_per_token / r), tf.int32)
        return DecodeState(
            step=tf.constant(0),
            frames=slot_buffer(max_steps, [b, r * n], tf.float32),
            alignments=slot_buffer(max_steps, [b, t_text], tf.float32),
            done=tf.zeros([b], tf.bool), lengths=tf.zeros([b], tf.int32),
            by_stop=tf.zeros([b], tf.bool), peaks=tf.zeros([b], tf.int32),
            previous=tf.zeros([b, r * n]), offset=offset,
            caches=tuple((slot_buffer(max_steps, cache_shape, self.compute_dtype),
                          slot_buffer(max_steps, cache_shape, self.compute_dtype), forward)
                         for _ in blocks),
            memory=tuple((block.cross_attentions[LATENTS].key_value_heads(latents),
                          block.cross_attentions[TEXT].key_value_heads(text))
                         for block in blocks),
            text_mask=key_padding_mask(token_lengths, t_text),
            limit=tf.clip_by_value(limit, 1, max_steps),
            norms=(() if self.decoder.voice_norms is None
                   else (self.decoder.norm_modulation(latents),)),
            statistics=statistics, matching=matching)

    def decode_steps(self, state: "DecodeState", steps, stop_threshold=None) -> "DecodeState":
        """Runs up to `steps` more decoder steps (fewer when every item has ended or the
        buffers are full) and returns the new state. Each step runs on weights read once per
        call (fused q/k/v, the mel and stop heads as one matrix) and writes one slot of the
        state's self-attention caches and frame and alignment buffers."""
        r = self.reduction_factor
        threshold = float(self.stop_threshold if stop_threshold is None else stop_threshold)
        stop_logit = math.log(threshold / (1.0 - threshold))
        capacity = state.frames.shape[0] or tf.shape(state.frames)[0]
        blocks = self.decoder.transformer.blocks
        keep_masks, encodings = self.decoder.position_tables(tf.range(capacity))
        step_weights = [block.step_weights() for block in blocks]
        final_norm = norm_weights(self.decoder.transformer.final_norm)
        decoder_weights = self.decoder.step_weights()
        end = tf.minimum(state.step + steps, capacity)

        def cond(s):
            return (s.step < end) & ~tf.reduce_all(s.done)

        def body(s):
            x = self.decoder.embed_step(s.previous,
                                        [tf.gather(m, s.step) for m in keep_masks],
                                        tf.gather(encodings, s.step), decoder_weights)
            masks = [None, self._step_text_mask(s)]
            block_modulations, final_modulation = self.decoder.transformer.split_modulation(
                s.norms[0] if s.norms else None)
            caches = []
            for block, (ck, cv, fw), kv, w, modulation in zip(
                    blocks, s.caches, s.memory, step_weights, block_modulations):
                x, ck, cv, weights, fw = block.step(x, ck, cv, s.step, kv, masks, w, fw,
                                                    modulation)
                caches.append((ck, cv, fw))
            frames, stop = self.decoder.step_heads(
                modulate(apply_norm(x, final_norm), final_modulation), decoder_weights)
            align = tf.reduce_mean(weights[TEXT], axis=1)[:, 0]
            s = self._record(s, frames + s.offset, stop, align, stop_logit, r)
            return (s._replace(previous=frames, caches=tuple(caches)),)

        if isinstance(steps, int) and in_static_context() and not in_xla_context():
            # `steps` steps unrolled, without a loop (the on-device decode_steps part: LiteRT's
            # WHILE op failed now and then). Steps after the end change nothing the caller reads
            # (lengths and done are kept), but they write slots: the caller allocates
            # steps - 1 slots beyond the length cap (EdgeGraphs.decode_start).
            for _ in range(steps):
                (state,) = body(state)
            return state
        maximum = steps if isinstance(steps, int) else None
        (state,) = tf.while_loop(cond, body, (state,), shape_invariants=(_invariants(state),),
                                 maximum_iterations=maximum)
        return state

    def decoded(self, state: "DecodeState") -> Dict[str, tf.Tensor]:
        """The decode's outputs from a state (the module docstring's `generate` outputs): the
        postnet over the frames written so far (with model.reference_matching, matched to
        the reference's frames: `reference_matched`); an item still running counts every
        frame decoded so far (stopped False)."""
        r, n = self.reduction_factor, self.n_mels
        capacity = state.frames.shape[0] or tf.shape(state.frames)[0]
        b = tf.shape(state.frames)[1]
        lengths = tf.where(state.done, state.lengths, state.step * r)
        mel_before = tf.reshape(tf.transpose(state.frames, [1, 0, 2]), [b, capacity * r, n])
        mel = self._postnet_decoded(mel_before, lengths)
        if state.matching:
            mel = _matched(mel, state.offset[:, :n], state.matching[0],
                           self.config.reference_matching,
                           length_mask(lengths, tf.shape(mel)[1]))
        return {"mel": mel, "mel_lengths": lengths,
                "alignments": tf.transpose(state.alignments, [1, 0, 2]),
                "stopped": state.by_stop}

    def _step_text_mask(self, state: "DecodeState") -> tf.Tensor:
        """The tokens step `state.step` may attend to, [B, 1, 1, T]: the decode window around
        the attention's furthest peak (decode_attention_window)."""
        text_mask = state.text_mask
        ahead = self.config.decode_attention_window
        if ahead <= 0:
            return text_mask
        return text_mask & window_mask(state.peaks, 1, ahead, tf.shape(text_mask)[-1])

    @staticmethod
    def _record(state: "DecodeState", frames, stop, align, stop_logit: float,
                r: int) -> "DecodeState":
        """Stores step `state.step` (frames [B, r*n], stop logits [B, r], align [B, T_text];
        with model.reference_statistics the frames as `_mapped`), applies the stopping rules
        and advances the step."""
        step = state.step
        if state.statistics:
            frames, statistics = _mapped(frames, state.offset, state.statistics, state.done, r)
            state = state._replace(statistics=statistics)
        over = stop > stop_logit
        stopped = tf.reduce_any(over, axis=-1)
        first = tf.argmax(tf.cast(over, tf.int32), axis=-1, output_type=tf.int32)
        ended = stopped | (step + 1 >= state.limit)
        finishing = ended & ~state.done
        new_lengths = tf.where(stopped, step * r + first + 1, (step + 1) * r)
        return state._replace(
            step=step + 1,
            frames=write_slot(state.frames, step, frames),
            alignments=write_slot(state.alignments, step, align),
            done=state.done | ended,
            lengths=tf.where(finishing, new_lengths, state.lengths),
            by_stop=state.by_stop | (finishing & stopped),
            peaks=tf.maximum(state.peaks, tf.argmax(align, axis=-1, output_type=tf.int32)))

    def _reference_decode(self, tokens, token_lengths, language_ids, latents, max_steps: int,
                          stop_threshold: float) -> Dict[str, tf.Tensor]:
        """The decode by full recomputation: every step runs the teacher-forced decoder over
        all steps so far (no cache). Slow (quadratic); it exists to check the cached decode
        against (tests/test_models.py, benchmarks/bench_decode.py), and records its steps with
        the same `_record`."""
        state = self.start_decode(tokens, token_lengths, language_ids, latents, max_steps)
        r = self.reduction_factor
        stop_logit = math.log(stop_threshold / (1.0 - stop_threshold))
        text = self.text_encoder(tf.convert_to_tensor(tokens, tf.int32),
                                 tf.cast(token_lengths, tf.int32),
                                 tf.cast(language_ids, tf.int32))
        latents = self.split_latents(tf.cast(latents, self.compute_dtype))[0]
        b, t_text = tf.shape(state.done)[0], tf.shape(state.text_mask)[-1]

        def cond(s, inputs, windows):
            return (s.step < max_steps) & ~tf.reduce_all(s.done)

        def body(s, inputs, windows):
            # The text masks of the steps so far ([B, steps, T_text]), so recomputing a step
            # sees the window it was decoded with.
            windows = tf.concat([windows, self._step_text_mask(s)[:, :, 0]], axis=1)
            frames, stop, weights = self.decoder(inputs, latents, text, windows[:, None])
            frames, stop = frames[:, -1], stop[:, -1]
            align = tf.reduce_mean(weights[:, -self.config.num_heads:], axis=1)[:, -1]
            s = self._record(s, frames + s.offset, stop, align, stop_logit, r)
            return s, tf.concat([inputs, frames[:, None]], axis=1), windows

        # The full-recompute inputs and windows grow by one step per iteration.
        invariants = (_invariants(state), tf.TensorShape([None, None, r * self.n_mels]),
                      tf.TensorShape([None, None, None]))
        state, _, _ = tf.while_loop(
            cond, body, (state, tf.zeros([b, 1, r * self.n_mels]),
                         tf.zeros([b, 0, t_text], tf.bool)),
            shape_invariants=invariants, maximum_iterations=max_steps)
        return self.decoded(state)

    def _postnet_decoded(self, mel_before, lengths):
        """Postnet over a decoded mel [B, max_steps*r, n]. Frames past an item's length are zero
        before and after every postnet convolution, so a plain graph runs it on the longest
        item's frames only (its cost follows the decode, not max_steps); XLA needs static
        shapes and runs all frames."""
        frames = tf.shape(mel_before)[1]
        if in_static_context():
            return self.postnet(mel_before, length_mask(lengths, frames))
        used = tf.reduce_max(lengths)
        mel = self.postnet(mel_before[:, :used], length_mask(lengths, used))
        return tf.reshape(tf.pad(mel, [[0, 0], [0, frames - used], [0, 0]]),
                          [tf.shape(mel_before)[0], mel_before.shape[1] or frames, self.n_mels])


# model.reference_statistics: a written frame counts as speech when its mean log10 mel is at
# most this far (10 dB) below the reference spectrum's mean; the statistics start with this many
# frames of the reference's own mean and spread, so the first frames are mapped gently.
STATISTICS_SPEECH_RANGE = 1.0
STATISTICS_PRIOR_FRAMES = 20
# The most a band's deviations are stretched or shrunk (a near-constant band is not blown up).
STATISTICS_MAX_SCALE = 2.0


def _start_statistics(spread) -> tuple:
    """DecodeState.statistics before any frame is written (`_mapped`)."""
    zeros = tf.zeros_like(spread)
    return (spread, zeros[:, :1], zeros, zeros)


def _mapped(frames, offset, statistics, done, r: int):
    """One step's written frames [B, r*n] (log10 mel, before the postnet) mapped to the
    reference's statistics, and the statistics with them. The step's speech frames (of items
    still running) join each band's count, sum and sum of squares; the band's mean m and
    deviation s are those of the speech frames written so far, with STATISTICS_PRIOR_FRAMES
    frames of the reference's mean (spectrum) and spread added to each; every frame becomes
    spectrum + (frame - m) * spread / s (the factor kept within [1 / STATISTICS_MAX_SCALE,
    STATISTICS_MAX_SCALE]). A frame depends only on the frames before it, so the streamed
    decode maps it as the whole decode does."""
    spread, count, sums, squares = statistics
    n = spread.shape[-1]
    spectrum = offset[:, :n]
    x = tf.reshape(frames, [-1, r, n])
    floor = tf.reduce_mean(spectrum, axis=-1)[:, None, None] - STATISTICS_SPEECH_RANGE
    speech = tf.cast((tf.reduce_mean(x, axis=-1, keepdims=True) >= floor)
                     & ~done[:, None, None], tf.float32)
    count = count + tf.reduce_sum(speech, axis=1)
    sums = sums + tf.reduce_sum(x * speech, axis=1)
    squares = squares + tf.reduce_sum(tf.square(x) * speech, axis=1)
    prior = float(STATISTICS_PRIOR_FRAMES)
    mean = (prior * spectrum + sums) / (prior + count)
    # the prior frames stray by the spread around the mean, the written ones by their own
    # distance from it
    variance = (prior * tf.square(spread) + squares - 2.0 * mean * sums
                + count * tf.square(mean)) / (prior + count)
    scale = tf.clip_by_value(spread / tf.sqrt(tf.maximum(variance, 1e-6)),
                             1.0 / STATISTICS_MAX_SCALE, STATISTICS_MAX_SCALE)
    mapped = spectrum[:, None] + (x - mean[:, None]) * scale[:, None]
    return tf.reshape(mapped, tf.shape(frames)), (spread, count, sums, squares)


def _matched(mel, spectrum, reference, share: float, valid=None):
    """The postnet's output mel [B, T, n] (log10), each speech frame (its mean at most
    STATISTICS_SPEECH_RANGE below the reference spectrum's [B, n], as `_mapped` tells them)
    where `valid` [B, T] (None: everywhere) moved `share` of the way toward the mean of its
    REFERENCE_MATCHING_NEIGHBOURS nearest (Euclidean) frames of `reference` [B, F, n] (the
    reference's speech frames, REFERENCE_FRAME_PAD rows past them; a reference with fewer
    frames leaves its item's frames as they are). A frame depends on no other, so a window
    matches as the whole mel does."""
    k = REFERENCE_MATCHING_NEIGHBOURS
    x = tf.cast(mel, tf.float32)
    real = tf.reduce_mean(reference, axis=-1) > REFERENCE_FRAME_PAD / 2  # [B, F]
    distances = (tf.reduce_sum(tf.square(x), axis=-1, keepdims=True)
                 - 2.0 * tf.matmul(x, reference, transpose_b=True)
                 + tf.reduce_sum(tf.square(reference), axis=-1)[:, None])  # [B, T, F]
    distances = tf.where(real[:, None], distances, tf.float32.max)
    _, nearest = tf.math.top_k(-distances, k)  # [B, T, k]
    target = tf.reduce_mean(tf.gather(reference, nearest, batch_dims=1), axis=2)
    floor = tf.reduce_mean(spectrum, axis=-1)[:, None, None] - STATISTICS_SPEECH_RANGE
    enough = tf.reduce_sum(tf.cast(real, tf.int32), axis=-1) >= k
    move = (tf.reduce_mean(x, axis=-1, keepdims=True) >= floor) & enough[:, None, None]
    if valid is not None:
        move &= valid[:, :, None]
    return tf.where(move, x + share * (target - x), x)


def _relative(mel, spectrum):
    """Absolute frames mel [B, T, n] in the decoder's terms: less the reference spectrum
    [B, n] (None: none)."""
    if spectrum is not None:
        mel = mel - tf.cast(spectrum, mel.dtype)[:, None]
    return mel


def _absolute(frames, spectrum):
    """The inverse of `_relative`."""
    if spectrum is not None:
        frames = frames + tf.cast(spectrum, frames.dtype)[:, None]
    return frames
