"""The recogniser that judges the words (Whisper through faster-whisper, myxtts.evaluation.
recognizer) run for real on speech flite makes, and the normalisation both sides of a word error
rate go through (myxtts.evaluation.metrics)."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import librosa
import numpy as np
import soundfile as sf

from myxtts.evaluation import metrics
from myxtts.evaluation.recognizer import RecognizerUnavailableError, Whisper, load_recognizer
from tests.judges import WHISPER_MISSING

SAID = "On the 17th of May, Mr. Smith paid $3 for twenty-one apples."
OTHER = "And God called the firmament Heaven, and the evening and the morning were the second day."


class NormalisationTest(unittest.TestCase):
    def test_numbers_abbreviations_case_and_punctuation_are_spelled_alike(self):
        self.assertEqual(metrics.words("On the 17th of May, Mr. Smith paid $3.15 - twenty-first!"),
                         ["on", "the", "seventeenth", "of", "may", "mister", "smith", "paid",
                          "three", "dollars", "and", "fifteen", "cents", "twenty", "first"])
        self.assertEqual(metrics.words("In 1999 he was 42."),
                         ["in", "nineteen", "ninety", "nine", "he", "was", "forty", "two"])
        # What Whisper writes and what the text says count as the same words.
        self.assertEqual(metrics.word_errors("the seventeenth of may", "The 17th of May."), (0, 4))
        self.assertEqual(metrics.word_errors("he paid three dollars", "He paid $3."), (0, 4))
        self.assertEqual(metrics.word_errors("Don't go", "don't, go!"), (0, 2))

    def test_word_and_character_errors_count_substitutions_deletions_insertions(self):
        self.assertEqual(metrics.word_errors("a b c d", "a x c"), (2, 4))
        self.assertEqual(metrics.word_errors("a b", "a b c d"), (2, 2))
        self.assertEqual(metrics.character_errors("the cat", "the hat"), (1, 7))
        self.assertEqual(metrics.character_errors("seventeen", "17"), (0, 9))
        self.assertAlmostEqual(metrics.word_error_rate("one two three four", "one too three"), 0.5)
        with self.assertRaisesRegex(ValueError, "no words"):
            metrics.word_error_rate("...", "something")

    def test_other_languages_keep_their_numbers_as_written(self):
        self.assertEqual(metrics.words("Am 3. Mai, Straße!", "de"), ["am", "3", "mai", "straße"])


class LoadRecognizerTest(unittest.TestCase):
    def test_none_is_not_asked_for(self):
        self.assertEqual(load_recognizer("none", ["en"]), (None, "not asked for"))

    def test_without_the_package_auto_says_why_and_whisper_is_an_error(self):
        with mock.patch.dict(sys.modules, {"faster_whisper": None}):  # as if not installed
            recognizer, why = load_recognizer("auto", ["en"])
            self.assertIsNone(recognizer)
            self.assertIn("not installed", why)
            self.assertIn("pip install 'myxtts[eval]'", why)
            with self.assertRaisesRegex(RecognizerUnavailableError, "not installed"):
                load_recognizer("whisper", ["en"])

    @unittest.skipIf(WHISPER_MISSING, WHISPER_MISSING)
    def test_a_folder_without_a_model_is_named(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        recognizer, why = load_recognizer("auto", ["en"], folder)
        self.assertIsNone(recognizer)
        self.assertIn(f"{folder} holds no model.bin", why)

    @unittest.skipIf(WHISPER_MISSING, WHISPER_MISSING)
    def test_the_english_model_does_not_judge_other_languages(self):
        recognizer, why = load_recognizer("auto", ["en", "de"])
        self.assertIsNone(recognizer)
        self.assertIn("English-only", why)
        self.assertIn("are in de", why)
        with self.assertRaisesRegex(RecognizerUnavailableError, "--recognizer-model DIR"):
            load_recognizer("whisper", ["de"])


@unittest.skipIf(WHISPER_MISSING, WHISPER_MISSING)
@unittest.skipUnless(shutil.which("flite"), "flite is not installed (apt-get install flite)")
class WhisperHearsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        path = os.path.join(cls.tmp, "said.wav")
        subprocess.run(["flite", "-voice", "slt", "-t", SAID, "-o", path], check=True)
        cls.audio, cls.rate = sf.read(path, dtype="float32")
        cls.recognizer = Whisper()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_it_hears_the_sentence_and_not_another(self):
        heard = self.recognizer.transcribe(self.audio, self.rate, "en")
        self.assertLessEqual(metrics.word_error_rate(SAID, heard), 0.1, heard)
        self.assertGreaterEqual(metrics.word_error_rate(OTHER, heard), 0.8, heard)
        # The same audio at another rate is resampled to the recogniser's 16 kHz first.
        at_22k = librosa.resample(self.audio, orig_sr=self.rate, target_sr=22050)
        self.assertLessEqual(metrics.word_error_rate(
            SAID, self.recognizer.transcribe(at_22k, 22050, "en")), 0.1)
        # Deterministic: the same audio is heard the same way.
        self.assertEqual(self.recognizer.transcribe(self.audio, self.rate, "en"), heard)

    def test_silence_is_heard_as_no_words(self):
        silence = np.zeros(self.rate * 2, np.float32)
        self.assertEqual(metrics.words(self.recognizer.transcribe(silence, self.rate)), [])
        self.assertEqual(self.recognizer.transcribe(np.zeros(0, np.float32), self.rate), "")


if __name__ == "__main__":
    unittest.main()
