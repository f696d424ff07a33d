"""XTTSModel: the XTTS-style acoustic model (text + speaker reference → log10 mel).

Public API (docs/model.md has the diagram and the contracts):

    model = XTTSModel(config.model, vocab_size, num_languages, n_mels)   # weights built here
    out = model(batch, training=...)        # teacher forced; batch as in docs/architecture.md
        out["mel_before"]  float32 [B, T_mel, n_mels]  decoder output (values past mel_lengths
                                                       are unspecified)
        out["mel_after"]   float32 [B, T_mel, n_mels]  + postnet residual (0 past mel_lengths)
        out["stop_logits"] float32 [B, T_mel]          PER FRAME; frame mel_lengths-1 is the stop
        out["alignments"]  float32 [B, T_mel / r, T_text]  text cross-attention of the last
                                                       decoder block, mean over heads
        out["text_attention"] float32 [B, layers*H, T_mel / r, T_text]  every block's text
                                                       cross-attention heads (guided loss)
    latents = model.speaker_latents(ref_mel, ref_lengths, training=False)   # float32 [B, L, d]
    out = model.generate(tokens, token_lengths, language_ids, latents, max_steps=None)
        out["mel"]         float32 [B, max_steps * r, n_mels]  postnet output, 0 past mel_lengths
        out["mel_lengths"] int32   [B]
        out["alignments"]  float32 [B, max_steps, T_text]
        out["stopped"]     bool    [B]  True where the stop head ended the item (False: the
                                        length cap did)

`generate` also takes keyword-only `stop_threshold`, `use_cache` (False = full-recompute
reference path) and `jit_compile`. `decode` is the graph-building body of `generate` for callers
that wrap it in their own tf.function (the SavedModel exporter). The output length of `generate`
is static (max_steps * r, max_steps defaulting to model.max_decoder_steps) so it compiles with XLA
and exports with fixed shapes; slice each item with mel_lengths.

All weights are created in the constructor, so constructing the model inside
`with tf.device(...)` puts every variable there.
"""

from __future__ import annotations

import functools
import math
from typing import Dict, Optional

import keras
import tensorflow as tf

from myxtts.config import ModelConfig
from myxtts.models.decoder import TEXT, LATENTS, MelDecoder, Postnet, previous_step_inputs
from myxtts.models.encoders import SpeakerEncoder, TextEncoder
from myxtts.models.layers import (apply_norm, fold_seed, forward_initial_state,
                                  in_xla_context, key_padding_mask, length_mask, norm_weights,
                                  slot_buffer, window_mask, write_slot)


class _FunctionCache:
    """Compiled generate functions by options; a plain object so Keras/TF tracking ignores it."""

    def __init__(self):
        self.functions = {}


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
        latents = self.speaker_encoder(batch["ref_mel"], tf.cast(batch["ref_lengths"], tf.int32),
                                       seed=fold_seed(seed, 1), training=training)
        mel = batch["mel"]
        b, t = tf.shape(mel)[0], tf.shape(mel)[1]
        frames, stop, text_attention = self.decoder(
            previous_step_inputs(mel, r), latents, text,
            key_padding_mask(token_lengths, tf.shape(tokens)[1]), seed=fold_seed(seed, 2),
            training=training)
        mel_before = tf.reshape(frames, [b, t, n])
        mel_after = self.postnet(mel_before, length_mask(batch["mel_lengths"], t))
        return {"mel_before": mel_before, "mel_after": mel_after,
                "stop_logits": tf.reshape(stop, [b, t]),
                "alignments": tf.reduce_mean(text_attention[:, -self.config.num_heads:], axis=1),
                "text_attention": text_attention}

    def speaker_latents(self, ref_mel, ref_lengths, training=False) -> tf.Tensor:
        """Reference log10 mel [B, T_ref, n_mels] → float32 latents [B, L, d_model]."""
        latents = self.speaker_encoder(ref_mel, tf.cast(ref_lengths, tf.int32),
                                       seed=self._dropout_seed(training), training=training)
        return tf.cast(latents, tf.float32)

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
        """Graph body of `generate` (a tf.while_loop); call it inside a tf.function.

        Item b stops after the first frame whose stop probability exceeds `stop_threshold`, or
        after ceil(token_lengths[b] * max_frames_per_token / r) steps, or after max_steps steps.
        With model.decode_attention_window = w > 0, every text cross-attention of step s may
        only look at tokens [p - 1, p + w], p being the peak of step s-1's alignment (forced
        monotonic: p never moves back), so the decode reads the text in order.
        """
        r, n = self.reduction_factor, self.n_mels
        tokens = tf.convert_to_tensor(tokens, tf.int32)
        token_lengths = tf.cast(token_lengths, tf.int32)
        b, t_text = tf.shape(tokens)[0], tf.shape(tokens)[1]
        text = self.text_encoder(tokens, token_lengths, tf.cast(language_ids, tf.int32))
        text_mask = key_padding_mask(token_lengths, t_text)
        latents = tf.cast(latents, self.compute_dtype)
        limit = tf.cast(tf.math.ceil(tf.cast(token_lengths, tf.float32)
                                     * self.max_frames_per_token / r), tf.int32)
        limit = tf.clip_by_value(limit, 1, max_steps)
        stop_logit = math.log(stop_threshold / (1.0 - stop_threshold))
        slots = tf.range(max_steps)
        ahead = self.config.decode_attention_window

        def step_text_mask(peaks):
            if ahead <= 0:
                return text_mask
            return text_mask & window_mask(peaks, 1, ahead, t_text)

        def record(step, frames, stop, align, frames_buf, align_buf, done, lengths, by_stop,
                   peaks):
            """Stores step `step` (frames [B, r*n], stop [B, r], align [B, T_text]) and applies
            the stopping rules."""
            frames_buf = write_slot(frames_buf, step, frames)
            align_buf = write_slot(align_buf, step, align)
            over = stop > stop_logit
            stopped = tf.reduce_any(over, axis=-1)
            first = tf.argmax(tf.cast(over, tf.int32), axis=-1, output_type=tf.int32)
            ended = stopped | (step + 1 >= limit)
            finishing = ended & ~done
            new_lengths = tf.where(stopped, step * r + first + 1, (step + 1) * r)
            peaks = tf.maximum(peaks, tf.argmax(align, axis=-1, output_type=tf.int32))
            return (frames_buf, align_buf, done | ended,
                    tf.where(finishing, new_lengths, lengths), by_stop | (finishing & stopped),
                    peaks)

        # Slot-major decode buffers (layers.slot_buffer): one slot written per step.
        state = (tf.constant(0), slot_buffer(max_steps, [b, r * n], tf.float32),
                 slot_buffer(max_steps, [b, t_text], tf.float32), tf.zeros([b], tf.bool),
                 tf.zeros([b], tf.int32), tf.zeros([b], tf.bool), tf.zeros([b], tf.int32))

        def cond(step, frames_buf, align_buf, done, *_):
            return (step < max_steps) & ~tf.reduce_all(done)

        if use_cache:
            blocks = self.decoder.transformer.blocks
            memory_kv = [[block.cross_attentions[LATENTS].key_value_heads(latents),
                          block.cross_attentions[TEXT].key_value_heads(text)]
                         for block in blocks]
            heads = blocks[0].self_attention
            shape = [b, heads.num_heads, heads.head_dim]
            forward = forward_initial_state(b, heads.num_heads, t_text)
            caches = tuple((slot_buffer(max_steps, shape, self.compute_dtype),
                            slot_buffer(max_steps, shape, self.compute_dtype), forward)
                           for _ in blocks)

            keep_masks, encodings = self.decoder.position_tables(slots)
            step_weights = [block.step_weights() for block in blocks]
            final_norm = norm_weights(self.decoder.transformer.final_norm)
            decoder_weights = self.decoder.step_weights()

            def body(step, frames_buf, align_buf, done, lengths, by_stop, peaks, previous,
                     caches):
                # One step as [B, ...] rows on weights read before the loop (layers.apply_dense).
                x = self.decoder.embed_step(previous, [tf.gather(m, step) for m in keep_masks],
                                            tf.gather(encodings, step), decoder_weights)
                masks = [None, step_text_mask(peaks)]
                new_caches = []
                for block, (ck, cv, fw), kv, w in zip(blocks, caches, memory_kv, step_weights):
                    x, ck, cv, weights, fw = block.step(x, ck, cv, step, kv, masks, w, fw)
                    new_caches.append((ck, cv, fw))
                frames, stop = self.decoder.step_heads(apply_norm(x, final_norm),
                                                       decoder_weights)
                align = tf.reduce_mean(weights[TEXT], axis=1)[:, 0]
                out = record(step, frames, stop, align, frames_buf, align_buf, done, lengths,
                             by_stop, peaks)
                return (step + 1, *out, frames, tuple(new_caches))

            loop_vars = (*state, tf.zeros([b, r * n]), caches)
        else:
            def body(step, frames_buf, align_buf, done, lengths, by_stop, peaks, inputs,
                     windows):
                windows = tf.concat([windows, step_text_mask(peaks)[:, :, 0]], axis=1)
                frames, stop, weights = self.decoder(inputs, latents, text, windows[:, None])
                frames, stop = frames[:, -1], stop[:, -1]
                align = tf.reduce_mean(weights[:, -self.config.num_heads:], axis=1)[:, -1]
                out = record(step, frames, stop, align, frames_buf, align_buf, done, lengths,
                             by_stop, peaks)
                return (step + 1, *out, tf.concat([inputs, frames[:, None]], axis=1), windows)

            # The text masks of the steps so far ([B, steps, T_text]), so recomputing a step
            # sees the window it was decoded with.
            loop_vars = (*state, tf.zeros([b, 1, r * n]), tf.zeros([b, 0, t_text], tf.bool))
        # The batch dimension is left open (axis 1 of the slot-major buffers, 0 elsewhere): a
        # retraced function (other text lengths) may see it unknown in the body while the
        # initial values know it, which tf.while_loop rejects; the full-recompute path's inputs
        # and windows also grow by one step per iteration.
        def open_batch(v, axis=0):
            dims = v.shape.as_list()
            if dims:
                dims[axis] = None
            return tf.TensorShape(dims)

        invariants = [tf.TensorShape([]), open_batch(state[1], 1), open_batch(state[2], 1),
                      *[open_batch(v) for v in state[3:]]]
        if use_cache:
            invariants += [open_batch(loop_vars[-2]),
                           tuple((open_batch(ck, 1), open_batch(cv, 1), open_batch(fw))
                                 for ck, cv, fw in caches)]
        else:
            invariants += [tf.TensorShape([None, None, r * n]), tf.TensorShape([None, None, None])]
        final = tf.while_loop(cond, body, loop_vars, shape_invariants=tuple(invariants),
                              maximum_iterations=max_steps)
        _, frames_buf, align_buf, _, lengths, by_stop = final[:6]
        mel_before = tf.reshape(tf.transpose(frames_buf, [1, 0, 2]), [b, max_steps * r, n])
        return {"mel": self._postnet_decoded(mel_before, lengths), "mel_lengths": lengths,
                "alignments": tf.transpose(align_buf, [1, 0, 2]), "stopped": by_stop}

    def _postnet_decoded(self, mel_before, lengths):
        """Postnet over a decoded mel [B, max_steps*r, n]. Frames past an item's length are zero
        before and after every postnet convolution, so a plain graph runs it on the longest
        item's frames only (its cost follows the decode, not max_steps); XLA needs static
        shapes and runs all frames."""
        frames = tf.shape(mel_before)[1]
        if in_xla_context():
            return self.postnet(mel_before, length_mask(lengths, frames))
        used = tf.reduce_max(lengths)
        mel = self.postnet(mel_before[:, :used], length_mask(lengths, used))
        return tf.reshape(tf.pad(mel, [[0, 0], [0, frames - used], [0, 0]]),
                          [tf.shape(mel_before)[0], mel_before.shape[1] or frames, self.n_mels])
