"""data.voice_shifts: shifted copies of the training speakers are other voices (pitch and length
scaled), speakers of their own with their own references, cached like any utterance; validation
is never shifted."""

import shutil
import tempfile
import unittest

from tests.logical_devices import PLAN  # noqa: F401  (first: configures the devices)

import numpy as np  # noqa: E402

from myxtts.data import audio as audio_lib  # noqa: E402
from myxtts.data.cache import load_samples  # noqa: E402
from myxtts.data.pipeline import InputPipeline  # noqa: E402
from myxtts.data.voice_shifts import (WARP_STEPS, envelope_smoother, shift_voice,  # noqa: E402
                                    shifted_length, warp_matrices)
from tests.data_samples import SAMPLE_DIR, tiny_config  # noqa: E402


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


class ShiftVoiceTest(unittest.TestCase):
    def test_pitch_and_length_scale_by_the_factor(self):
        rate = 16000
        tone = np.sin(2 * np.pi * 200 * np.arange(rate) / rate).astype(np.float32)
        for factor in (0.8, 1.25):
            length = shifted_length(rate, factor)
            shifted = shift_voice(tone, factor, length)
            self.assertEqual(shifted.shape, (length,))
            self.assertEqual(shifted.dtype, np.float32)
            self.assertAlmostEqual(len(shifted), rate / factor, delta=1)
            self.assertAlmostEqual(dominant_hz(shifted, rate), 200 * factor, delta=2)


class ShiftedSpeakersInThePipelineTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        cls.config = tiny_config(voice_shifts=[0.8, 1.25], feature_mode="cached",
                                 val_fraction=0.2, cache_dir=f"{cls.work}/cache")
        cls.pipeline = InputPipeline(cls.config, SAMPLE_DIR, work_dir=cls.work)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_shifted_copies_are_speakers_with_their_own_references(self):
        train = self.pipeline.items["train"]
        by_id = {it.id: it for it in train if it.voice_shift == 1.0}
        for factor in (0.8, 1.25):
            copies = [it for it in train if it.voice_shift == factor]
            self.assertTrue(copies)
            for copy in copies:
                original = by_id[copy.id.removesuffix(f"~{factor:g}")]
                self.assertEqual(copy.speaker, f"{original.speaker}~{factor:g}")
                self.assertEqual(copy.tokens, original.tokens)
        self.assertTrue(all(it.voice_shift == 1.0 for it in self.pipeline.items["val"]))
        pools = self.pipeline.reference_pools
        for index, item in enumerate(train):
            pool = pools.pool("train", index)
            self.assertTrue(pool)
            self.assertTrue(all(ref.speaker == item.speaker and ref.clip != item.clip
                                for ref in pool), item.id)

    def test_a_shifted_utterance_is_its_original_played_faster(self):
        d = self.config.data
        train = self.pipeline.items["train"]
        copy = next(it for it in train if it.voice_shift == 1.25)
        original = next(it for it in train if it.id == copy.id.split("~")[0])
        samples = load_samples(copy, d)
        self.assertEqual(len(samples), copy.num_samples)
        self.assertAlmostEqual(copy.num_samples, original.num_samples / 1.25, delta=1)
        # The cached features of the copy are the mel of those samples.
        mel = audio_lib.LogMel.from_config(d)(samples[None])[0].numpy()
        found = []
        for batch in (self.pipeline.featurize(b) for b in self.pipeline.train_dataset(0)):
            for row, length in enumerate(batch["mel_lengths"].numpy()):
                tokens = batch["tokens"][row, : int(batch["token_lengths"][row])].numpy()
                if length == mel.shape[0] and tuple(tokens) == copy.tokens:
                    found.append(batch["mel"][row, :length].numpy())
        self.assertTrue(any(np.allclose(f, mel, atol=1e-4) for f in found))


class VoiceWarpTest(unittest.TestCase):
    """data.voice_warp: each training item's mels warped along frequency by one seeded factor,
    the same for its target and its reference; validation is never warped."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        common = dict(feature_mode="cached", val_fraction=0.2, cache_dir=f"{cls.work}/cache")
        cls.config = tiny_config(voice_warp=0.15, **common)
        cls.pipeline = InputPipeline(cls.config, SAMPLE_DIR, work_dir=cls.work)
        cls.plain = InputPipeline(tiny_config(**common), SAMPLE_DIR, work_dir=cls.work)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def test_a_factor_above_one_moves_a_band_up_and_the_middle_one_is_the_identity(self):
        matrices = warp_matrices(self.config.data)
        n = self.config.data.n_mels
        np.testing.assert_array_equal(matrices[WARP_STEPS // 2], np.eye(n, dtype=np.float32))
        peak = np.zeros([1, n], np.float32)
        peak[0, n // 2] = 1.0
        self.assertLess(int(np.argmax(peak @ matrices[0])), n // 2)
        self.assertGreater(int(np.argmax(peak @ matrices[-1])), n // 2)
        np.testing.assert_allclose(matrices.sum(axis=1), 1.0, atol=1e-6)

    def test_an_envelope_warp_moves_the_formant_and_leaves_the_harmonics(self):
        data = tiny_config(voice_warp=0.15, voice_warp_envelope=True).data
        n = data.n_mels
        matrices = warp_matrices(data)
        smoother = envelope_smoother(n)
        bands = np.arange(n)
        # A log-mel frame: a harmonic comb every 5 bands on a broad formant at band n / 2.
        frame = ((bands % 5 == 0) + 2.0 * np.exp(-0.5 * ((bands - n // 2) / 6.0) ** 2))[None]
        fine = frame - frame @ smoother
        for k in (0, WARP_STEPS - 1):
            moved = (frame @ matrices[k]) @ smoother
            self.assertEqual(np.sign(np.argmax(moved) - n // 2), np.sign(k - WARP_STEPS // 2))
            warped = frame @ matrices[k]
            kept = warped - warped @ smoother
            inner = slice(5, n - 5)  # the smoother's edges renormalise its window
            self.assertGreater(np.corrcoef(fine[0, inner], kept[0, inner])[0, 1], 0.99)
            whole = frame @ warp_matrices(tiny_config(voice_warp=0.15).data)[k]
            whole_fine = whole - whole @ smoother
            self.assertLess(np.corrcoef(fine[0, inner], whole_fine[0, inner])[0, 1], 0.5)
        np.testing.assert_allclose(matrices[WARP_STEPS // 2], np.eye(n), atol=1e-6)
        np.testing.assert_allclose(matrices.sum(axis=1), 1.0, atol=1e-5)

    def test_training_batches_are_warped_by_their_items_factor_and_validation_is_not(self):
        matrices = warp_matrices(self.config.data)
        warped = [next(iter(self.pipeline.train_dataset(0))) for _ in range(2)]
        plain = next(iter(self.plain.train_dataset(0)))
        self.assertNotIn("voice_warp", plain)
        # Seeded: the same epoch warps the same way.
        np.testing.assert_array_equal(warped[0]["voice_warp"], warped[1]["voice_warp"])
        self.assertGreater(len(set(warped[0]["voice_warp"].numpy().tolist())), 1)
        got, raw = self.pipeline.featurize(warped[0]), self.plain.featurize(plain)
        np.testing.assert_array_equal(warped[0]["tokens"], plain["tokens"])
        for row, k in enumerate(warped[0]["voice_warp"].numpy()):
            for key in ("mel", "ref_mel"):
                np.testing.assert_allclose(got[key][row], raw[key][row].numpy() @ matrices[k],
                                           atol=1e-5)
        val, val_plain = (next(iter(p.val_dataset())) for p in (self.pipeline, self.plain))
        self.assertNotIn("voice_warp", val)
        for key in ("mel", "ref_mel"):
            np.testing.assert_array_equal(self.pipeline.featurize(val)[key],
                                          self.plain.featurize(val_plain)[key])
