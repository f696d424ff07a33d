"""Pitch and energy per token (model.prosody_features, with decoder_input aligned_text), as
FastPitch ("FastPitch: Parallel Text-to-speech with Pitch Prediction", Łańcucki 2021) and
FastSpeech 2: in training each token's mean pitch and energy come from its frames of the
recording (placed by the aligner's path) and are added, projected, to the text the decoder's
steps read; a predictor learns them from the text; in decoding the predicted values take their
place. The decoder then need not average over the ways a line can be said.

    pitch, weight = frame_pitch(mel, combs, log2_f0)          # [B, T_mel] each
    energy = frame_energy(mel)                                 # [B, T_mel]
    prosody = token_prosody(mel, mel_lengths, frame_tokens, t_text, combs, log2_f0)
                                                               # [B, T_text, PROSODY_FEATURES]

The pitch is read off the log mel itself (no pitch tracker on the waveform, so every batch,
cached or not, has it): the harmonic comb (`data.audio.mel_pitch_combs`) that best matches a
frame's low bands, by correlation. A token's pitch is its frames' pitch weighted by their
level in the low bands, so silence and unvoiced sounds (little energy below 800 Hz) hardly
count.
"""

from __future__ import annotations

import math

import tensorflow as tf

from myxtts.models.layers import length_mask

PROSODY_FEATURES = 2  # log2(f0 / PITCH_REFERENCE_HZ), mean log10 mel over the bands
PITCH_REFERENCE_HZ = 160.0
_COMB_RANGE = 1.5  # log10 units below a frame's (or comb's) peak that the match looks at


def _centred_unit(x, axis):
    x = x - tf.reduce_mean(x, axis=axis, keepdims=True)
    return x * tf.math.rsqrt(tf.reduce_sum(tf.square(x), axis=axis, keepdims=True) + 1e-12)


def frame_pitch(mel, combs, log2_f0):
    """log10 mel [B, T, n_mels] → (log2(f0 / PITCH_REFERENCE_HZ) of the best-matching comb
    [B, T], the frame's summed mel magnitude in the comb's bands relative to the item's loudest
    frame there [B, T] in (0, 1]). float32, no gradient."""
    combs = tf.constant(combs)
    bands = combs.shape[0]
    low = tf.stop_gradient(tf.cast(mel[..., :bands], tf.float32))
    low = tf.maximum(low, tf.reduce_max(low, axis=-1, keepdims=True) - _COMB_RANGE)
    combs = tf.maximum(combs, tf.reduce_max(combs, axis=0, keepdims=True) - _COMB_RANGE)
    scores = tf.einsum("btm,mc->btc", _centred_unit(low, -1), _centred_unit(combs, 0))
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    pitch = tf.gather(tf.constant(log2_f0), best) - math.log2(PITCH_REFERENCE_HZ)
    level = tf.reduce_logsumexp(tf.stop_gradient(tf.cast(mel[..., :bands], tf.float32))
                                * math.log(10.0), axis=-1)
    return pitch, tf.exp(level - tf.reduce_max(level, axis=1, keepdims=True))


def frame_energy(mel):
    """Mean log10 mel over the bands [B, T] (float32, no gradient)."""
    return tf.reduce_mean(tf.stop_gradient(tf.cast(mel, tf.float32)), axis=-1)


def token_prosody(mel, mel_lengths, frame_tokens, t_text, combs, log2_f0):
    """Each token's pitch (its frames' `frame_pitch`, weighted by their low-band level) and
    energy (the mean of its frames' `frame_energy`) [B, t_text, PROSODY_FEATURES] float32, the
    frames placed by `frame_tokens` [B, T_mel] (the aligner's path); valid frames only. A token
    with no frame gets 0."""
    pitch, weight = frame_pitch(mel, combs, log2_f0)
    valid = tf.cast(length_mask(mel_lengths, tf.shape(mel)[1]), tf.float32)
    on = tf.one_hot(frame_tokens, t_text) * valid[..., None]  # [B, T_mel, t_text]
    weighted = on * weight[..., None]
    pitch = tf.math.divide_no_nan(tf.einsum("bft,bf->bt", weighted, pitch),
                                  tf.reduce_sum(weighted, axis=1))
    energy = tf.math.divide_no_nan(tf.einsum("bft,bf->bt", on, frame_energy(mel)),
                                   tf.reduce_sum(on, axis=1))
    return tf.stack([pitch, energy], axis=-1)
