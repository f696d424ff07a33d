"""Audio: the tf.signal log-mel matches librosa on real speech (against librosa in float64, at
most twice librosa's own float32 error and never more than 2e-3, plain and as laid out for a CPU
or GPU data device), splitting the frames over launches and chunks changes nothing,
batching/padding does not change a frame, decoding handles every format, reference slices stay
within bounds."""

import os
import tempfile
import unittest

import numpy as np
import soundfile as sf

from myxtts.config import XTTSConfig
from myxtts.data import audio
from myxtts.data import audio_io, audio_math
from tests.data_samples import sample_rows, tiny_config
from tests.mel_reference import librosa_log_mel

PARITY = 1e-3


def _diff(a, b) -> float:
    return float(np.abs(a - b).max())


class LogMelParityTest(unittest.TestCase):
    def test_matches_librosa_float64_as_closely_as_librosa_float32_does(self):
        d = tiny_config().data
        featurizers = {"plain": audio.LogMel.from_config(d),
                       "CPU layout": audio.LogMel.for_device(d, "CPU"),
                       "GPU layout": audio.LogMel.for_device(d, "GPU")}
        rows = sample_rows()
        for uid, _, _, _, path in rows[::7]:  # ogg, flac, wav; en, de, es; both speakers
            samples = audio_io.decode(path, d.sample_rate).samples
            reference = librosa_log_mel(samples, d, np.float64)
            # Twice librosa float32's own error, and never under a few float32 steps of the
            # largest value (rounding, which the CPU's kernels order differently).
            resolution = 4 * np.finfo(np.float32).eps * float(np.abs(reference).max())
            bound = min(max(2 * _diff(librosa_log_mel(samples, d), reference), resolution), 2e-3)
            for name, log_mel in featurizers.items():
                got = log_mel(samples[None])[0].numpy()
                self.assertEqual(got.shape, reference.shape)
                self.assertLessEqual(_diff(got, reference), bound, (uid, name))

    def test_frames_split_over_launches_and_chunks_are_the_frames_of_one_pass(self):
        d = tiny_config().data
        rng = np.random.default_rng(0)
        for hop in (d.hop_length, d.hop_length + 44):  # a hop that divides n_fft, one that not
            d.hop_length = hop
            plain = audio.LogMel.from_config(d)
            for width, rows in ((8000, 3), (1, 2), (d.n_fft, 1), (700, 0)):
                batch = rng.normal(0, 0.1, (rows, width)).astype(np.float32)
                one = plain(batch).numpy()
                self.assertEqual(one.shape, (rows, audio_math.num_frames(width, hop), d.n_mels))
                # 4 launches of 3 short rows: some get only padding; 5 divides no launch's frames
                for parts, chunk in ((1, 0), (2, 0), (4, 0), (2, 24), (3, 5), (4, 1)):
                    got = audio.LogMel.from_config(d, xla_parts=parts, chunk_frames=chunk)(batch)
                    np.testing.assert_allclose(got.numpy(), one, rtol=0, atol=1e-6,
                                               err_msg=f"hop {hop}, {rows}x{width}, "
                                                       f"{parts} launches, chunks of {chunk}")

    def test_matches_librosa_with_base_config_and_short_window(self):
        d = XTTSConfig().data  # 22.05 kHz, n_fft 1024, 80 mels
        d.win_length = 800  # window shorter than the FFT: librosa centres it
        samples = audio_io.decode(sample_rows()[1][4], d.sample_rate).samples
        got = audio.LogMel.from_config(d)(samples[None])[0].numpy()
        self.assertLessEqual(float(np.abs(got - librosa_log_mel(samples, d)).max()), PARITY)

    def test_padding_in_a_batch_does_not_change_frames(self):
        d = tiny_config().data
        log_mel = audio.LogMel.from_config(d)
        a = audio_io.decode(sample_rows()[0][4], d.sample_rate).samples
        b = audio_io.decode(sample_rows()[1][4], d.sample_rate).samples
        width = max(len(a), len(b)) + 3000
        batch = np.zeros([2, width], np.float32)
        batch[0, :len(a)], batch[1, :len(b)] = a, b
        mel, lengths = log_mel.masked(batch, np.array([len(a), len(b)], np.int32))
        mel, lengths = mel.numpy(), lengths.numpy()
        self.assertEqual(list(lengths), [audio_math.num_frames(len(a), d.hop_length),
                                         audio_math.num_frames(len(b), d.hop_length)])
        for row, samples in enumerate((a, b)):
            alone = librosa_log_mel(samples, d)
            self.assertLessEqual(float(np.abs(mel[row, :lengths[row]] - alone).max()), PARITY)
            np.testing.assert_allclose(mel[row, lengths[row]:], np.log10(d.mel_floor))


class DecodeTest(unittest.TestCase):
    def test_stereo_is_downmixed_and_rate_converted(self):
        with tempfile.TemporaryDirectory() as tmp:
            t = np.arange(44100) / 44100.0
            left, right = np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 440 * t) * 0.5
            path = os.path.join(tmp, "x.flac")
            sf.write(path, np.stack([left, right], 1).astype(np.float32), 44100)
            decoded = audio_io.decode(path, 16000)
        self.assertEqual((decoded.source_rate, decoded.source_channels), (44100, 2))
        self.assertEqual(decoded.samples.ndim, 1)
        self.assertAlmostEqual(len(decoded.samples), 16000, delta=2)
        self.assertAlmostEqual(float(np.abs(decoded.samples).max()), 0.75, delta=0.02)

    def test_trim_and_loudness(self):
        d = tiny_config().data
        samples = audio_io.decode(sample_rows()[0][4], d.sample_rate).samples
        padded = np.concatenate([np.zeros(8000, np.float32), samples,
                                 np.zeros(8000, np.float32)])
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.wav")
            sf.write(path, padded, d.sample_rate, subtype="FLOAT")
            trimmed = audio_io.decode(path, d.sample_rate, trim_silence=True, trim_top_db=40).samples
        self.assertLess(len(trimmed), len(samples) + 2000)
        louder = audio_math.normalize_loudness(samples, -20.0)
        rms_db = 20 * np.log10(np.sqrt(np.mean(louder.astype(np.float64) ** 2)))
        self.assertTrue(abs(rms_db + 20.0) < 0.5 or np.abs(louder).max() >= 0.98)


class ReferenceSliceTest(unittest.TestCase):
    def test_slices_are_between_min_and_max_seconds(self):
        rng = np.random.default_rng(0)
        for _ in range(200):
            n = int(rng.integers(16000, 16000 * 10))
            start, length = audio_io.reference_slice(n, 16000, 2.0, 6.0, rng)
            self.assertGreaterEqual(length, min(n, 32000))
            self.assertLessEqual(length, 96000)
            self.assertLessEqual(start + length, n)
        self.assertEqual(audio_io.reference_slice(8000, 16000, 2.0, 6.0, rng), (0, 8000))


if __name__ == "__main__":
    unittest.main()
