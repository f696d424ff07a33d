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
from myxtts.data.voice_shifts import shift_voice, shifted_length  # noqa: E402
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
