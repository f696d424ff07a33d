"""Griffin-Lim: log10 mel → waveform with tf.signal, for listening to mels before a vocoder exists
(TensorBoard audio during training, quick synthesis checks).

The mel is inverted through the pseudo-inverse of the same Slaney filterbank the features use
(myxtts.data.audio.mel_filterbank, magnitude spectrogram); phases are recovered by the classic
iteration (Griffin & Lim, 1984) with the momentum of Perraudin et al. (2013) ("fast Griffin-Lim").
TensorFlow has STFT/ISTFT but no Griffin-Lim, hence this module.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from myxtts.data.audio import mel_filterbank


class GriffinLim:
    """`GriffinLim.from_config(config.data)(log_mel [T, n_mels]) -> float32 waveform [samples]`.

    The waveform keeps the level the mel describes (clipped to [-1, 1], as the neural vocoders'
    output), so windows of one utterance vocoded apart (streaming) join at one level. The
    starting phases are keyed by frame position: `first_frame` = the window's first frame in
    the utterance gives its frames the phases they start from in the whole utterance."""

    def __init__(self, sample_rate: int, n_fft: int, hop_length: int, win_length: int,
                 n_mels: int, fmin: float, fmax: float, iterations: int = 32,
                 momentum: float = 0.99):
        self.n_fft, self.hop, self.win = n_fft, hop_length, win_length
        self.iterations = iterations
        self.momentum = momentum
        self._inverse = tf.constant(np.linalg.pinv(
            mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)).astype(np.float32))
        self._compiled = tf.function(self._synthesize, reduce_retracing=True)

    @classmethod
    def from_config(cls, data_config, iterations: int = 32) -> "GriffinLim":
        d = data_config
        return cls(d.sample_rate, d.n_fft, d.hop_length, d.win_length, d.n_mels, d.fmin, d.fmax,
                   iterations)

    def __call__(self, log_mel, first_frame=0) -> tf.Tensor:
        return self._compiled(tf.convert_to_tensor(log_mel, tf.float32),
                              tf.convert_to_tensor(first_frame, tf.int32))

    def _stft(self, audio):
        return tf.signal.stft(audio, self.win, self.hop, self.n_fft,
                              window_fn=tf.signal.hann_window, pad_end=True)

    def _istft(self, spec):
        return tf.signal.inverse_stft(
            spec, self.win, self.hop, self.n_fft,
            window_fn=tf.signal.inverse_stft_window_fn(self.hop, tf.signal.hann_window))

    def _synthesize(self, log_mel, first_frame):
        mel = tf.pow(10.0, log_mel)  # [T, n_mels]
        magnitude = tf.maximum(tf.matmul(mel, self._inverse), 0.0)
        magnitude = tf.cast(magnitude, tf.complex64)  # [T, n_fft//2+1]
        frames = tf.shape(magnitude)[0]
        # Rows first_frame.. of one counter-based table: a window's frames start from the
        # phases the same frames have in the whole utterance.
        bins = tf.shape(magnitude)[1]
        phase = tf.exp(tf.complex(0.0, tf.random.stateless_uniform(
            [first_frame + frames, bins], seed=[0, 0], maxval=2.0 * np.pi)[first_frame:]))
        spec = magnitude * phase
        previous = spec
        momentum = tf.cast(self.momentum, tf.complex64)
        for _ in tf.range(self.iterations):  # a tf.while_loop: one small graph for any count
            rebuilt = self._stft(self._istft(spec))[:frames]
            rebuilt = tf.ensure_shape(
                tf.pad(rebuilt, [[0, frames - tf.shape(rebuilt)[0]], [0, 0]]), spec.shape)
            accelerated = rebuilt + momentum * (rebuilt - previous)
            previous = rebuilt
            spec = magnitude * tf.exp(tf.complex(0.0, tf.math.angle(accelerated)))
        # Frame i starts at sample i*hop here, while the features' frame i is centred there
        # (librosa center=True): the waveform leads the original by win_length // 2 samples and
        # has (frames - 1) * hop + win_length samples (myxtts.inference.vocoding relies on that).
        return tf.clip_by_value(self._istft(spec), -1.0, 1.0)
