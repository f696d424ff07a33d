"""Pitch and energy per token (model.prosody_features): the pitch read off a log mel by
harmonic combs, each token's pitch and energy over its aligned frames, and a tiny model whose
decoder steps read them: teacher forced with the recording's, decoding with the predictor's.

    python -m pytest tests/test_prosody.py -v
"""

import math
import unittest

import numpy as np
import tensorflow as tf

from myxtts.data.audio import LogMel, mel_pitch_combs
from myxtts.models.prosody import (PITCH_REFERENCE_HZ, frame_energy, frame_pitch,
                                   token_prosody)
from tests.model_helpers import decode_both_ways, random_batch, tiny_config, tiny_model

SR = 16000


def _harmonic_tone(f0: float, seconds: float = 0.5, amplitude: float = 0.1) -> np.ndarray:
    """A voice-like tone: every harmonic of f0 below 7 kHz, falling 6 dB an octave."""
    t = np.arange(int(seconds * SR)) / SR
    tone = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, int(7000 // f0) + 1))
    return (amplitude * tone).astype(np.float32)


class FramePitchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = tiny_config().data
        cls.data.sample_rate, cls.data.n_fft, cls.data.hop_length = SR, 1024, 256
        cls.data.win_length, cls.data.n_mels, cls.data.fmin, cls.data.fmax = 1024, 80, 0.0, 8000.0
        cls.combs = mel_pitch_combs(cls.data)
        cls.log_mel = LogMel.from_config(cls.data)

    def test_reads_the_pitch_of_low_and_high_voices(self):
        for f0 in (95.0, 130.0, 210.0, 340.0):
            mel = self.log_mel(tf.constant(_harmonic_tone(f0)[None]))
            pitch, _ = frame_pitch(mel, *self.combs)
            steady = pitch.numpy()[0, 4:-4] + math.log2(PITCH_REFERENCE_HZ)
            np.testing.assert_allclose(steady, math.log2(f0), atol=0.05, err_msg=str(f0))

    def test_weights_follow_the_level_below_the_combs_top(self):
        loud = _harmonic_tone(150.0)
        mel = self.log_mel(tf.constant(np.concatenate([loud, 0.01 * loud])[None]))
        _, weight = frame_pitch(mel, *self.combs)
        weight = weight.numpy()[0]
        self.assertAlmostEqual(float(weight.max()), 1.0, places=5)
        # the mel holds magnitudes: a hundredth of the amplitude, a hundredth of the weight
        ratio = np.median(weight[-10:]) / np.median(weight[4:20])
        self.assertAlmostEqual(float(ratio), 0.01, delta=0.001)


class TokenProsodyTest(unittest.TestCase):
    def test_each_token_averages_its_own_valid_frames(self):
        data = tiny_config().data
        combs = mel_pitch_combs(data)
        rng = np.random.default_rng(0)
        mel = tf.constant(rng.normal(-2.0, 1.0, (2, 9, data.n_mels)).astype(np.float32))
        path = tf.constant([[0, 0, 1, 1, 1, 2, 2, 2, 2], [0, 1, 1, 1, 1, 1, 1, 1, 1]])
        lengths = tf.constant([9, 5])
        got = token_prosody(mel, lengths, path, 4, *combs).numpy()
        pitch, weight = (x.numpy() for x in frame_pitch(mel, *combs))
        energy = frame_energy(mel).numpy()
        for b, length in enumerate(lengths.numpy()):
            tokens = path.numpy()[b, :length]
            for token in range(4):
                on = np.flatnonzero(tokens == token)
                if not len(on):
                    np.testing.assert_array_equal(got[b, token], [0.0, 0.0])
                    continue
                w = weight[b, on]
                self.assertAlmostEqual(float(got[b, token, 0]),
                                       float((w * pitch[b, on]).sum() / w.sum()), places=5)
                self.assertAlmostEqual(float(got[b, token, 1]), float(energy[b, on].mean()),
                                       places=5)


class ProsodyModelTest(unittest.TestCase):
    """No frame depends on decoded frames, so decoding with the recording's durations and its
    tokens' pitch and energy gives exactly the teacher-forced frames, and the decode by default
    reads what the prosody predictor says."""

    @classmethod
    def setUpClass(cls):
        tf.random.set_seed(0)
        cls.config = tiny_config(text_alignment="durations", decoder_input="aligned_text",
                                 prosody_features=True)
        cls.r = cls.config.model.reduction_factor
        cls.model = tiny_model(cls.config)
        cls.batch = random_batch(cls.config)

    def _decode(self, token_ends, prosody, steps):
        b, model = self.batch, self.model
        latents = model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        state = model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"], latents,
                                   steps)
        voiced = model.decoder.condition_text(
            model.text_encoder(b["tokens"], b["token_lengths"], b["language_ids"]),
            model.split_latents(latents)[0])
        if prosody is None:
            prosody = model.prosody_predictor(voiced, b["token_lengths"])
        state = state._replace(token_ends=token_ends, text=model.with_prosody(voiced, prosody))
        state = model.decode_steps(state, steps, 1 - 1e-6)
        return tf.reshape(tf.transpose(state.frames, [1, 0, 2]), [2, steps * self.r, -1])

    def test_decoding_with_the_recordings_durations_and_prosody_gives_the_teacher_forced_frames(
            self):
        b = self.batch
        out = self.model(b, training=False)
        steps = b["mel"].shape[1] // self.r
        ends = tf.cast(tf.cumsum(out["durations"], axis=1), tf.int32)
        frames = self._decode(ends, out["prosody"], steps)
        for i, length in enumerate(b["mel_lengths"].numpy()):
            np.testing.assert_allclose(frames[i, :length], out["mel_before"][i, :length],
                                       atol=1e-4)
        # Another pitch and energy make other frames.
        moved = self._decode(ends, out["prosody"] + 0.5, steps)
        self.assertGreater(float(np.abs(moved - frames).max()), 1e-2)

    def test_the_decode_reads_the_predicted_prosody(self):
        b = self.batch
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        state = self.model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"],
                                        latents, 6)
        own = self.model.decode_steps(state, 6, 1 - 1e-6)
        frames = tf.reshape(tf.transpose(own.frames, [1, 0, 2]), [2, 6 * self.r, -1])
        np.testing.assert_allclose(self._decode(state.token_ends, None, 6), frames, atol=1e-5)

    def test_the_cached_decode_equals_full_recompute(self):
        decode_both_ways(self, self.model, self.batch)

    def test_a_model_without_the_datas_combs_is_refused(self):
        from myxtts.models.xtts import XTTSModel
        with self.assertRaisesRegex(ValueError, "pitch_combs"):
            XTTSModel(self.config.model, 40, 2, self.config.data.n_mels)


if __name__ == "__main__":
    unittest.main()
