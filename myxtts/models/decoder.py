"""Autoregressive mel decoder: prenet, causal transformer with cross-attention, heads, postnet.

Decoder steps: with reduction factor r, step s predicts frames [s*r, (s+1)*r). Its input is the
r frames of step s-1 flattened to r*n_mels (a zero "go" group for s = 0), through the prenet.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.config import ModelConfig
from myxtts.models.layers import (TransformerStack, apply_dense, causal_mask, dense_weights,
                                  fold_seed, indexed, sinusoidal_encoding, stateless_dropout)

# Decoder memories, in the order of the blocks' cross-attention sub-layers.
LATENTS, TEXT = 0, 1


def _position_keep_mask(positions: tf.Tensor, width: int, layer: int, rate: float) -> tf.Tensor:
    """Inference-time dropout keep mask [len(positions), width] as a pure function of
    (position, unit, layer): an integer hash (lowbias32, in int64 with explicit 32-bit wrap since
    uint32 kernels are missing on CPU), exact on every device and under XLA, so cached and
    full-recompute decoding see identical masks. Scaled by 1/(1-rate)."""
    low32 = tf.constant(0xFFFFFFFF, tf.int64)

    def mul(x, c):
        return tf.bitwise.bitwise_and(x * tf.constant(c, tf.int64), low32)

    def xorshift(x, bits):
        return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(bits, tf.int64)))

    pos = tf.cast(positions, tf.int64)[:, None]
    unit = tf.range(width, dtype=tf.int64)[None, :]
    x = tf.bitwise.bitwise_and(mul(pos, 0x9E3779B1) + mul(unit, 0x85EBCA77)
                               + (layer * 0x27D4EB2F + 0x165667B1), low32)
    x = xorshift(mul(xorshift(mul(xorshift(x, 16), 0x7FEB352D), 15), 0x846CA68B), 16)
    uniform = tf.cast(tf.bitwise.right_shift(x, tf.constant(8, tf.int64)), tf.float32) / float(1 << 24)
    return tf.cast(uniform >= rate, tf.float32) / (1.0 - rate)


class Prenet(keras.layers.Layer):
    """Two ReLU layers with dropout that stays on at inference (Tacotron): random masks in
    training, fixed position-keyed masks otherwise (deterministic, identical in every decode
    path)."""

    def __init__(self, in_dim: int, units: int, rate: float, **kwargs):
        super().__init__(**kwargs)
        self.in_dim, self.units, self.rate = in_dim, units, rate
        self.layers_ = indexed(self, "dense", [
            keras.layers.Dense(units, activation="relu", name=f"dense_{i}") for i in range(2)])

    def build(self, input_shape=None):
        self.layers_[0].build((None, None, self.in_dim))
        self.layers_[1].build((None, None, self.units))
        self.built = True

    def keep_masks(self, positions):
        """Inference keep masks, one [S, units] float32 table per layer (empty if rate == 0)."""
        if self.rate <= 0:
            return []
        return [_position_keep_mask(positions, self.units, i, self.rate) for i in range(2)]

    def call(self, x, keep_masks=(), seed=None, training=False):
        """x [B, S, in_dim]. Training: random dropout from `seed`. Otherwise: `keep_masks`
        (from `keep_masks(positions)`) for the S positions of x."""
        for i, dense in enumerate(self.layers_):
            x = dense(x)
            if self.rate <= 0:
                continue
            if training:
                x = stateless_dropout(x, self.rate, fold_seed(seed, i))
            else:
                x = x * tf.cast(keep_masks[i], x.dtype)[None]
        return x


class Postnet(keras.layers.Layer):
    """Residual conv stack refining the decoder's mel; padded frames are zeroed before every
    convolution so they never leak into valid frames ("same" padding sees zeros either way)."""

    def __init__(self, config: ModelConfig, n_mels: int, **kwargs):
        # autocast off: the residual path stays float32; the convolutions cast for themselves.
        super().__init__(autocast=False, **kwargs)
        self.n_mels = n_mels
        n = config.postnet_layers
        self.convs = indexed(self, "conv", [
            keras.layers.Conv1D(n_mels if i == n - 1 else config.postnet_channels,
                                config.postnet_kernel, padding="same",
                                activation=None if i == n - 1 else "tanh", name=f"conv_{i}")
            for i in range(n)])

    @property
    def receptive_field(self) -> int:
        """Frames of context on EACH side that an output frame depends on ("same" padding:
        (kernel - 1) / 2 per convolution). A streaming driver gives every chunk that many
        frames of left and right context."""
        return sum((conv.kernel_size[0] - 1) // 2 for conv in self.convs)

    def build(self, input_shape=None):
        channels = self.n_mels
        for conv in self.convs:
            conv.build((None, None, channels))
            channels = conv.filters
        self.built = True

    def call(self, mel, frame_mask):
        """mel [B, T, n_mels] float32, frame_mask [B, T] bool → mel + residual (float32)."""
        mel = tf.cast(mel, tf.float32)
        keep = tf.cast(frame_mask, tf.float32)[..., None]
        x = mel
        for conv in self.convs:
            x = conv(x * tf.cast(keep, x.dtype))
        return (mel + tf.cast(x, tf.float32)) * keep


class MelDecoder(keras.layers.Layer):
    """Prenet → input projection + sinusoidal step positions → causal pre-LN transformer that
    cross-attends to the speaker latents and the text (with model.voice_norms, its norms
    scaled and shifted by the voice) → mel (r frames/step) and stop heads."""

    def __init__(self, config: ModelConfig, n_mels: int, **kwargs):
        super().__init__(**kwargs)
        self.r, self.n_mels, self.d_model = config.reduction_factor, n_mels, config.d_model
        self.dropout = config.dropout
        self.self_feeding = config.self_feeding
        self.prenet = Prenet(self.r * n_mels, config.prenet_dim, config.prenet_dropout,
                             name="prenet")
        self.input_projection = keras.layers.Dense(config.d_model, name="input_projection")
        self.transformer = TransformerStack(
            config.decoder_layers, config.d_model, config.num_heads,
            config.ff_multiplier * config.d_model, config.dropout, num_memories=2,
            gradient_checkpointing=config.gradient_checkpointing, forward_memory=TEXT,
            name="transformer")
        # Heads in float32: their outputs feed the losses directly (Keras mixed-precision advice).
        self.mel_projection = keras.layers.Dense(self.r * n_mels, dtype="float32",
                                                 name="mel_projection")
        self.stop_projection = keras.layers.Dense(self.r, dtype="float32",
                                                  name="stop_projection")
        self.speaker_projection = (keras.layers.Dense(config.d_model, name="speaker_projection")
                                   if config.speaker_text_conditioning else None)
        # model.voice_norms: every norm's scale and shift from the voice, zero at the start
        # (plain layer norm).
        self.voice_norms = (keras.layers.Dense(self.transformer.norm_count * 2 * config.d_model,
                                               kernel_initializer="zeros", name="voice_norms")
                            if config.voice_norms else None)

    def build(self, input_shape=None):
        self.prenet.build(None)
        self.input_projection.build((None, None, self.prenet.units))
        self.transformer.build(None)
        self.mel_projection.build((None, None, self.d_model))
        self.stop_projection.build((None, None, self.d_model))
        if self.speaker_projection is not None:
            self.speaker_projection.build((None, self.d_model))
        if self.voice_norms is not None:
            self.voice_norms.build((None, self.d_model))
        self.built = True

    def condition_text(self, text, latents):
        """The text memory the decoder attends to: the encoded text [B, T, d], plus (with
        model.speaker_text_conditioning) a projection of the mean of the speaker latents
        [B, L, d] on every token."""
        if self.speaker_projection is None:
            return text
        voice = self.speaker_projection(tf.reduce_mean(tf.cast(latents, text.dtype), axis=1))
        return text + tf.cast(voice, text.dtype)[:, None, :]

    def norm_modulation(self, latents):
        """model.voice_norms: the scale and shift of every transformer norm for each item,
        float32 [B, transformer.norm_count, 2, d], from the mean of the speaker latents
        [B, L, d]; None without."""
        if self.voice_norms is None:
            return None
        voice = self.voice_norms(tf.reduce_mean(latents, axis=1))
        return tf.reshape(tf.cast(voice, tf.float32),
                          [-1, self.transformer.norm_count, 2, self.d_model])

    def position_tables(self, positions):
        """Everything position-dependent for decoder steps `positions` [S]: (prenet keep masks,
        sinusoidal encodings [S, d]). Decoding computes them once and slices per step."""
        return self.prenet.keep_masks(positions), sinusoidal_encoding(positions, self.d_model)

    def embed_inputs(self, step_inputs, tables, seed=None, training=False):
        """step_inputs [B, S, r*n_mels] (previous steps' frames) and `position_tables` of those
        S steps → [B, S, d]."""
        keep_masks, encodings = tables
        x = self.input_projection(self.prenet(step_inputs, keep_masks, fold_seed(seed, 0),
                                              training=training))
        x = x + tf.cast(encodings, x.dtype)[None]
        return stateless_dropout(x, self.dropout, fold_seed(seed, 1))

    # ---- one decode step (see layers.dense_weights) ---------------------------------------
    def step_weights(self):
        """The weights of `embed_step` and `step_heads`, read once before a decode loop; the
        mel and stop heads as one matrix. The transformer's come from its blocks'
        `step_weights` and `layers.norm_weights(transformer.final_norm)`."""
        return {"prenet": [dense_weights(layer) for layer in self.prenet.layers_],
                "input": dense_weights(self.input_projection),
                "heads": dense_weights(self.mel_projection, self.stop_projection)}

    def embed_step(self, previous, keep_rows, encoding, weights):
        """`embed_inputs` of one decode step: previous [B, r*n_mels] (the last step's frames),
        that step's keep-mask rows and encoding → [B, d]."""
        x = previous
        for i, layer_weights in enumerate(weights["prenet"]):
            x = tf.nn.relu(apply_dense(x, layer_weights))
            if self.prenet.rate > 0:
                x = x * tf.cast(keep_rows[i], x.dtype)
        x = apply_dense(x, weights["input"])
        return x + tf.cast(encoding, x.dtype)

    def step_heads(self, x, weights):
        """`heads` of one decode step: [B, d] → (frames [B, r*n_mels], stop logits [B, r])."""
        return tf.split(apply_dense(x, weights["heads"]), [self.r * self.n_mels, self.r], -1)

    def heads(self, x):
        """Decoder states [B, (S,) d] → (frames [B, (S,) r*n_mels], stop logits [B, (S,) r])."""
        return self.mel_projection(x), self.stop_projection(x)

    def feed_own_frames(self, step_inputs, latents, text, text_mask, seed, training):
        """Training with model.self_feeding: parallel scheduled sampling (Duckworth et al.
        2019). A first pass, without gradient, predicts every step's frames from the recorded
        ones; then, per step and item at rate model.self_feeding, the input of step s+1 becomes
        that prediction of step s instead of the recording, as in decoding, where the decoder
        continues its own frames. `text` is the conditioned text memory. Step 0 keeps the
        go-frame."""
        if not training or seed is None or self.self_feeding <= 0.0:
            return step_inputs
        frames, _, _ = self._forward(step_inputs, latents, text, text_mask, fold_seed(seed, 4),
                                     training)
        own = tf.stop_gradient(tf.pad(tf.cast(frames, step_inputs.dtype),
                                      [[0, 0], [1, 0], [0, 0]])[:, :-1])
        shape = tf.shape(step_inputs)
        fed = tf.random.stateless_uniform([shape[0], shape[1], 1],
                                          fold_seed(seed, 5)) < self.self_feeding
        return tf.where(fed, own, step_inputs)

    def call(self, step_inputs, latents, text, text_mask, seed=None, training=False):
        """Teacher-forced pass over all steps (`text` as the text encoder gives it; the speaker
        conditioning is applied here). `text_mask` is bool, broadcastable to
        [B, 1, S, T_text]. Returns (frames [B,S,r*n], stop [B,S,r], text cross-attention weights
        of every block, blocks then heads [B, layers*H, S, T_text] float32)."""
        text = self.condition_text(text, latents)
        step_inputs = self.feed_own_frames(step_inputs, latents, text, text_mask, seed, training)
        return self._forward(step_inputs, latents, text, text_mask, seed, training)

    def _forward(self, step_inputs, latents, text, text_mask, seed, training):
        """`call` after the speaker conditioning and self-feeding's input changes."""
        s = tf.shape(step_inputs)[1]
        x = self.embed_inputs(step_inputs, self.position_tables(tf.range(s)), seed, training)
        x, weights = self.transformer(x, causal_mask(s), memories=[latents, text],
                                      memory_masks=[None, text_mask], seed=fold_seed(seed, 2),
                                      training=training,
                                      modulation=self.norm_modulation(latents))
        frames, stop = self.heads(x)
        return frames, stop, tf.concat([w[TEXT] for w in weights], axis=1)


def previous_step_inputs(mel: tf.Tensor, r: int) -> tf.Tensor:
    """Teacher forcing: mel [B, T, n] (T a multiple of r) → inputs [B, T/r, r*n] where step s
    holds the frames of step s-1 and step 0 the zero go-group."""
    b, t, n = tf.shape(mel)[0], tf.shape(mel)[1], mel.shape[-1]
    steps = tf.reshape(mel, [b, t // r, r * n])
    return tf.pad(steps, [[0, 0], [1, 0], [0, 0]])[:, :-1]
