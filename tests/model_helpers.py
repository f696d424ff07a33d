"""Tiny acoustic models and synthetic batches for the model and loss tests."""

import os

import numpy as np
import tensorflow as tf

from myxtts.config import XTTSConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 40
LANGUAGES = 2


def tiny_config(**model_overrides) -> XTTSConfig:
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
    for key, value in model_overrides.items():
        setattr(config.model, key, value)
    return config


def tiny_model(config=None, **model_overrides):
    from myxtts.models.xtts import XTTSModel
    config = config or tiny_config(**model_overrides)
    return XTTSModel(config.model, VOCAB, LANGUAGES, config.data.n_mels)


def decode_both_ways(test, model, b):
    """Decodes batch `b` 8 steps with the KV cache and by full recomputation, asserts they agree
    and returns (the generate arguments, the cached decode). Threshold 1 - 1e-6: no early stop,
    so each item decodes past its predicted end."""
    latents = model.speaker_latents(b["ref_mel"], b["ref_lengths"])
    args = (b["tokens"], b["token_lengths"], b["language_ids"], latents)
    cached = model.generate(*args, max_steps=8, stop_threshold=1 - 1e-6)
    reference = model.generate(*args, max_steps=8, stop_threshold=1 - 1e-6, use_cache=False)
    test.assertLess(float(np.abs(cached["mel"] - reference["mel"]).max()), 1e-4)
    return args, cached


def random_batch(config, token_lengths=(7, 4), mel_lengths=(20, 13), ref_lengths=(12, 7),
                 text_len=None, mel_len=None, ref_len=None, seed=0):
    """A batch as in docs/architecture.md; padding holds garbage (not zeros) on purpose, so a
    model that reads padding is caught."""
    rng = np.random.default_rng(seed)
    r, n = config.model.reduction_factor, config.data.n_mels
    b = len(token_lengths)
    text_len = text_len or max(token_lengths)
    mel_len = mel_len or -(-max(mel_lengths) // r) * r
    ref_len = ref_len or max(ref_lengths)
    tokens = rng.integers(1, VOCAB, size=(b, text_len)).astype(np.int32)
    return {
        "tokens": tf.constant(tokens),
        "token_lengths": tf.constant(token_lengths, tf.int32),
        "language_ids": tf.constant([i % LANGUAGES for i in range(b)], tf.int32),
        "mel": tf.constant(rng.normal(-2.0, 1.0, (b, mel_len, n)).astype(np.float32)),
        "mel_lengths": tf.constant(mel_lengths, tf.int32),
        "ref_mel": tf.constant(rng.normal(-2.0, 1.0, (b, ref_len, n)).astype(np.float32)),
        "ref_lengths": tf.constant(ref_lengths, tf.int32),
    }


def pad_batch(batch, extra_text, extra_steps, extra_ref, r, seed=1):
    """Appends garbage-filled padding to every sequence input; lengths are unchanged."""
    rng = np.random.default_rng(seed)

    def grow(x, extra, axis_values):
        x = x.numpy()
        shape = list(x.shape)
        shape[1] = extra
        return tf.constant(np.concatenate([x, axis_values(shape).astype(x.dtype)], axis=1))

    out = dict(batch)
    out["tokens"] = grow(batch["tokens"], extra_text, lambda s: rng.integers(1, VOCAB, s))
    out["mel"] = grow(batch["mel"], extra_steps * r, lambda s: rng.normal(3.0, 2.0, s))
    out["ref_mel"] = grow(batch["ref_mel"], extra_ref, lambda s: rng.normal(3.0, 2.0, s))
    return out
