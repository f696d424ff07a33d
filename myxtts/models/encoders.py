"""Text encoder and the voice-cloning path (conditioning encoder + perceiver resampler)."""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.config import REFERENCE_MATCHING_FRAMES, ModelConfig
from myxtts.models.layers import (TransformerStack, fold_seed, indexed, key_padding_mask,
                                  length_mask, sinusoidal_encoding, stateless_dropout)


def _stack(config: ModelConfig, num_layers: int, num_memories: int, name: str):
    return TransformerStack(num_layers, config.d_model, config.num_heads,
                            config.ff_multiplier * config.d_model, config.dropout,
                            num_memories=num_memories,
                            gradient_checkpointing=config.gradient_checkpointing, name=name)


class ConvBlock(keras.layers.Layer):
    """Pre-LN residual 1-D convolution: x + Dropout(ReLU(Conv(LN(x)))); padded positions are
    zeroed before the convolution so they never leak into valid ones."""

    def __init__(self, d_model: int, kernel: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.dropout = d_model, dropout
        self.norm = keras.layers.LayerNormalization(epsilon=1e-5, name="norm")
        self.conv = keras.layers.Conv1D(d_model, kernel, padding="same", activation="relu",
                                        name="conv")

    def build(self, input_shape=None):
        self.norm.build((None, None, self.d_model))
        self.conv.build((None, None, self.d_model))
        self.built = True

    def call(self, x, keep, seed=None):
        """x [B, T, d]; keep [B, T, 1] 1.0 at valid positions."""
        h = self.conv(self.norm(x) * tf.cast(keep, x.dtype))
        return x + stateless_dropout(h, self.dropout, seed)


class TextEncoder(keras.layers.Layer):
    """Token + language embeddings → residual conv blocks → pre-LN transformer → [B, T_text, d].

    No absolute position is added to the text: with one, the decoder's text attention can
    satisfy the guided-attention prior by position alone (step s → token s·N/S, whatever the
    tokens say) and never learns to read; measured in docs/history.md (q3, q4). The
    convolutions give each token its neighbours (local order), so the decoder can only find
    "the next token" by what it has already said, which is reading.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, num_languages: int, **kwargs):
        super().__init__(**kwargs)
        d = config.d_model
        self.dropout = config.dropout
        self.token_embedding = keras.layers.Embedding(vocab_size, d, name="token_embedding")
        self.language_embedding = keras.layers.Embedding(num_languages, d,
                                                         name="language_embedding")
        self.convs = indexed(self, "conv", [
            ConvBlock(d, config.text_conv_kernel, config.dropout, name=f"conv_{i}")
            for i in range(config.text_conv_layers)])
        self.transformer = _stack(config, config.text_encoder_layers, 0, "transformer")

    def build(self, input_shape=None):
        for layer in (self.token_embedding, self.language_embedding):
            layer.build((None,))
        for conv in self.convs:
            conv.build(None)
        self.transformer.build(None)
        self.built = True

    def call(self, tokens, token_lengths, language_ids, seed=None, training=False):
        t = tf.shape(tokens)[1]
        x = self.token_embedding(tokens) + self.language_embedding(language_ids)[:, None, :]
        x = stateless_dropout(x, self.dropout, fold_seed(seed, 0))
        keep = length_mask(token_lengths, t)[..., None]
        for i, conv in enumerate(self.convs):
            x = conv(x, keep, seed=fold_seed(seed, 10 + i))
        x, _ = self.transformer(x, key_padding_mask(token_lengths, t), seed=fold_seed(seed, 1),
                                training=training)
        return x


# Speech frames of a reference, for its spectrum: frames whose mean log10 mel magnitude is within
# this much (30 dB) of the reference's loudest frame; pauses and silence do not count.
SPEECH_FRAME_RANGE = 1.5


def _speech_frames(mel, ref_lengths) -> tf.Tensor:
    """float32 [B, T, 1]: 1 on each reference's speech frames (within SPEECH_FRAME_RANGE of its
    loudest valid frame; valid: before ref_lengths), 0 elsewhere."""
    valid = length_mask(ref_lengths, tf.shape(mel)[1])
    level = tf.reduce_mean(mel, axis=-1)
    loudest = tf.reduce_max(tf.where(valid, level, level.dtype.min), axis=1, keepdims=True)
    return tf.cast(valid & (level >= loudest - SPEECH_FRAME_RANGE), tf.float32)[..., None]


def reference_spectrum(ref_mel, ref_lengths) -> tf.Tensor:
    """The mean log10 mel [B, n_mels] (float32) of each reference's speech frames
    (`_speech_frames`). A reference without valid frames gives zeros."""
    mel = tf.cast(ref_mel, tf.float32)
    speech = _speech_frames(mel, ref_lengths)
    return tf.math.divide_no_nan(tf.reduce_sum(mel * speech, axis=1),
                                 tf.reduce_sum(speech, axis=1))


def reference_spread(ref_mel, ref_lengths) -> tf.Tensor:
    """The standard deviation over time [B, n_mels] (float32) of each mel band of a reference's
    speech frames (`_speech_frames`): how far its frames stray from its spectrum. A reference
    without valid frames gives zeros."""
    mel = tf.cast(ref_mel, tf.float32)
    speech = _speech_frames(mel, ref_lengths)
    count = tf.reduce_sum(speech, axis=1)
    mean = tf.math.divide_no_nan(tf.reduce_sum(mel * speech, axis=1), count)
    variance = tf.math.divide_no_nan(
        tf.reduce_sum(tf.square(mel - mean[:, None]) * speech, axis=1), count)
    return tf.sqrt(variance)


# model.reference_matching: the value of every mel band of a reference frame row a reference too
# short to fill (XTTSModel.reference_frames tells them apart by it).
REFERENCE_FRAME_PAD = -100.0


def reference_frames(ref_mel, ref_lengths, count: int) -> tf.Tensor:
    """float32 [B, count, n_mels]: each reference's first `count` speech frames
    (`_speech_frames`) in order, REFERENCE_FRAME_PAD after its last."""
    mel = tf.cast(ref_mel, tf.float32)
    speech = _speech_frames(mel, ref_lengths)[..., 0]
    # the row each speech frame goes to (count: none), as a one-hot matrix [B, T, count]
    rows = tf.where(speech > 0, tf.cast(tf.cumsum(speech, axis=1), tf.int32) - 1, count)
    placement = tf.one_hot(rows, count, dtype=tf.float32)
    frames = tf.matmul(placement, mel, transpose_a=True)
    filled = tf.reduce_sum(placement, axis=1)[..., None] > 0
    return tf.where(filled, frames, REFERENCE_FRAME_PAD)


class SpeakerEncoder(keras.layers.Layer):
    """Reference mel → conditioning transformer → perceiver resampler → [B, L, d] latents.

    The perceiver resampler is a stack of cross-attention blocks whose queries are
    `num_speaker_latents` learned vectors, so any reference length gives L fixed latents
    (XTTS v2 uses 32). Padded reference frames are masked out of every attention. With
    model.reference_spectrum one row follows them: the reference's `reference_spectrum` in its
    first n_mels values, zeros after; with model.reference_statistics one more, its
    `reference_spread` laid out the same way (XTTSModel.split_latents takes them apart);
    with model.reference_matching REFERENCE_MATCHING_FRAMES more, its `reference_frames`
    (XTTSModel.reference_frames).
    """

    def __init__(self, config: ModelConfig, n_mels: int, **kwargs):
        super().__init__(**kwargs)
        self.n_mels = n_mels
        self.d_model = config.d_model
        self.num_latents = config.num_speaker_latents
        self.dropout = config.dropout
        self.with_spectrum = config.reference_spectrum
        self.with_spread = config.reference_statistics
        self.with_frames = bool(config.reference_matching)
        self.input_projection = keras.layers.Dense(config.d_model, name="input_projection")
        self.conditioning = _stack(config, config.conditioning_layers, 0, "conditioning")
        self.resampler = _stack(config, config.perceiver_layers, 1, "perceiver_resampler")

    def build(self, input_shape=None):
        self.input_projection.build((None, None, self.n_mels))
        self.latent_queries = self.add_weight(
            name="latent_queries", shape=(self.num_latents, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.conditioning.build(None)
        self.resampler.build(None)
        self.built = True

    def call(self, ref_mel, ref_lengths, seed=None, training=False):
        t = tf.shape(ref_mel)[1]
        x = self.input_projection(ref_mel)
        x = x + tf.cast(sinusoidal_encoding(tf.range(t), self.d_model), x.dtype)[None]
        x = stateless_dropout(x, self.dropout, fold_seed(seed, 0))
        keys = key_padding_mask(ref_lengths, t)
        x, _ = self.conditioning(x, keys, seed=fold_seed(seed, 1), training=training)
        queries = tf.cast(self.latent_queries, x.dtype)[None]
        queries = tf.tile(queries, [tf.shape(ref_mel)[0], 1, 1])
        latents, _ = self.resampler(queries, None, memories=[x], memory_masks=[keys],
                                    seed=fold_seed(seed, 2), training=training)
        rows = [reference_spectrum] if self.with_spectrum else []
        rows += [reference_spread] if self.with_spread else []
        rows = [row(ref_mel, ref_lengths)[:, None] for row in rows]
        if self.with_frames:
            rows.append(reference_frames(ref_mel, ref_lengths, REFERENCE_MATCHING_FRAMES))
        if not rows:
            return latents
        rows = tf.pad(tf.concat(rows, axis=1), [[0, 0], [0, 0], [0, self.d_model - self.n_mels]])
        return tf.concat([latents, tf.cast(rows, latents.dtype)], axis=1)
