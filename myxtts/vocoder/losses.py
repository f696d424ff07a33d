"""HiFi-GAN losses: least-squares GAN, feature matching, and L1 on the log-mel of the generated
waveform, computed with the project's own featurizer (myxtts.data.audio.LogMel) so the vocoder is
trained on exactly the features the acoustic model predicts; optionally the multi-resolution STFT
loss of Parallel WaveGAN (Yamamoto et al., 2020), which compares the linear spectra (the detail
inside each mel band) at several time-frequency resolutions.

All functions take float32 tensors and return float32 scalars (sums over sub-discriminators, as
in the paper's code).
"""

from __future__ import annotations

import math

import tensorflow as tf

from myxtts.vocoder.discriminators import Outputs

LN10 = math.log(10.0)


def discriminator_loss(real: Outputs, fake: Outputs) -> tf.Tensor:
    """Σ mean((1 - D(y))²) + mean(D(ŷ)²)."""
    return tf.add_n([tf.reduce_mean(tf.square(1.0 - r)) + tf.reduce_mean(tf.square(g))
                     for (r, _), (g, _) in zip(real, fake)])


def generator_adversarial_loss(fake: Outputs) -> tf.Tensor:
    """Σ mean((1 - D(ŷ))²)."""
    return tf.add_n([tf.reduce_mean(tf.square(1.0 - g)) for g, _ in fake])


def feature_matching_loss(real: Outputs, fake: Outputs) -> tf.Tensor:
    """Σ over sub-discriminators and layers of mean |features(y) - features(ŷ)|."""
    return tf.add_n([tf.reduce_mean(tf.abs(tf.cast(fr, tf.float32) - tf.cast(fg, tf.float32)))
                     for (_, real_maps), (_, fake_maps) in zip(real, fake)
                     for fr, fg in zip(real_maps, fake_maps)])


def mel_l1(log_mel, audio: tf.Tensor, target_mel: tf.Tensor) -> tf.Tensor:
    """Mean |log10 mel(audio) - target_mel| over the target's frames (project units; the
    generator loss multiplies it by ln 10, see vocoder.mel_loss_weight)."""
    frames = tf.shape(target_mel)[1]
    return tf.reduce_mean(tf.abs(log_mel(audio)[:, :frames] - target_mel))


def stft_loss(fake: tf.Tensor, real: tf.Tensor, resolutions) -> tf.Tensor:
    """Multi-resolution STFT loss: mean over `resolutions` [(n_fft, hop, window), ...] of the
    spectral convergence ||S(y) - S(ŷ)||_F / ||S(y)||_F plus mean |ln S(y) - ln S(ŷ)|, S being
    STFT magnitudes."""
    terms = []
    for n_fft, hop, window in resolutions:
        def magnitude(x, n_fft=n_fft, hop=hop, window=window):
            spec = tf.signal.stft(tf.cast(x, tf.float32), window, hop, n_fft)
            return tf.sqrt(tf.maximum(tf.square(tf.math.real(spec)) +
                                      tf.square(tf.math.imag(spec)), 1e-7))
        fake_magnitude, real_magnitude = magnitude(fake), magnitude(real)
        convergence = (tf.norm(real_magnitude - fake_magnitude, ord="fro", axis=[-2, -1]) /
                       tf.norm(real_magnitude, ord="fro", axis=[-2, -1]))
        terms.append(tf.reduce_mean(convergence) + tf.reduce_mean(
            tf.abs(tf.math.log(real_magnitude) - tf.math.log(fake_magnitude))))
    return tf.add_n(terms) / float(len(terms))
