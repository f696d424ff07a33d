"""Text encoder and the voice-cloning path (conditioning encoder + perceiver resampler)."""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.config import ModelConfig
from myxtts.models.layers import (TransformerStack, fold_seed, key_padding_mask,
                                  sinusoidal_encoding, stateless_dropout)


def _stack(config: ModelConfig, num_layers: int, num_memories: int, name: str):
    return TransformerStack(num_layers, config.d_model, config.num_heads,
                            config.ff_multiplier * config.d_model, config.dropout,
                            num_memories=num_memories,
                            gradient_checkpointing=config.gradient_checkpointing, name=name)


class TextEncoder(keras.layers.Layer):
    """Token + language embeddings + learned positions → pre-LN transformer → [B, T_text, d]."""

    def __init__(self, config: ModelConfig, vocab_size: int, num_languages: int, **kwargs):
        super().__init__(**kwargs)
        d = config.d_model
        self.dropout = config.dropout
        self.token_embedding = keras.layers.Embedding(vocab_size, d, name="token_embedding")
        self.language_embedding = keras.layers.Embedding(num_languages, d,
                                                         name="language_embedding")
        self.position_embedding = keras.layers.Embedding(config.max_text_positions, d,
                                                         name="position_embedding")
        self.transformer = _stack(config, config.text_encoder_layers, 0, "transformer")

    def build(self, input_shape=None):
        for layer in (self.token_embedding, self.language_embedding, self.position_embedding):
            layer.build((None,))
        self.transformer.build(None)
        self.built = True

    def call(self, tokens, token_lengths, language_ids, seed=None, training=False):
        t = tf.shape(tokens)[1]
        x = (self.token_embedding(tokens)
             + self.language_embedding(language_ids)[:, None, :]
             + self.position_embedding(tf.range(t))[None])
        x = stateless_dropout(x, self.dropout, fold_seed(seed, 0))
        x, _ = self.transformer(x, key_padding_mask(token_lengths, t), seed=fold_seed(seed, 1),
                                training=training)
        return x


class SpeakerEncoder(keras.layers.Layer):
    """Reference mel → conditioning transformer → perceiver resampler → [B, L, d] latents.

    The perceiver resampler is a stack of cross-attention blocks whose queries are
    `num_speaker_latents` learned vectors, so any reference length gives L fixed latents
    (XTTS v2 uses 32). Padded reference frames are masked out of every attention.
    """

    def __init__(self, config: ModelConfig, n_mels: int, **kwargs):
        super().__init__(**kwargs)
        self.n_mels = n_mels
        self.d_model = config.d_model
        self.num_latents = config.num_speaker_latents
        self.dropout = config.dropout
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
        return latents
