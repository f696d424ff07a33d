"""The project's central claim at test scale: a model trained a few hundred steps with the real
CLI on a tiny corpus says *its own* sentence. `myxtts-evaluate` synthesises each sentence
free-running and matches it (DTW mel-cepstral distance) against every sentence's recording;
the own recording must be the nearest more often than chance, and so must the model's
teacher-forced outputs (the measure's ceiling for it). (docs/results.md has the
full-size figures.)

When tests/test_learns_to_clone.py runs (flite and the speaker judge are installed), the model
judged is the one it judges (three flite voices, tests/flite_reader.py: trained once per test
run); otherwise a model of its own, trained on the bundled sample (two espeak-ng voices).

    python -m pytest tests/test_learns_to_read.py -v
"""

import contextlib
import io
import json
import os
import shutil
import tempfile
import unittest

import pytest

from myxtts.evaluate import guarded_main
from tests import flite_reader
from tests.data_samples import copy_sample_rows, write_metadata
from tests.device_harness import train_tiny_reader

STEPS = 400
SENTENCES = 24


@pytest.mark.slow
class LearnsToReadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-learns-")
        # The same sentences in another folder: evaluate holds every row out and picks each
        # one's reference among the other utterances of its speaker.
        cls.judged = os.path.join(cls.tmp, "judged")
        if flite_reader.cloning_test_runs():
            # 24 different sentences of the flite corpus, the voices taking turns (8 each).
            reader = flite_reader.trained()
            voices = len(flite_reader.VOICES)
            flite_reader.copy_rows(reader, cls.judged, [
                reader.lines[(number % voices) * len(reader.lines) // voices + number]
                for number in range(SENTENCES)])
            cls.run_dir = reader.run_dir
        else:
            # 24 English sentences of the bundled sample (two espeak-ng voices).
            data = os.path.join(cls.tmp, "data")
            write_metadata(data, copy_sample_rows(data, SENTENCES))
            cls.run_dir = train_tiny_reader(cls.tmp, data, STEPS)
            write_metadata(cls.judged, copy_sample_rows(cls.judged, SENTENCES))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_free_running_speech_is_nearest_to_its_own_sentence_more_often_than_chance(self):
        output = os.path.join(self.tmp, "report.json")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = guarded_main(["--checkpoint-dir", self.run_dir, "--data", self.judged, "--num",
                                 str(SENTENCES), "--recognizer", "none", "--speaker-judge", "none",
                                 "--output", output])
        self.assertEqual(code, 0)
        with open(output, encoding="utf-8") as f:
            mean = json.load(f)["mean"]
        self.assertAlmostEqual(mean["text_match_chance"], 1 / SENTENCES)
        self.assertGreater(mean["text_match"], 2 * mean["text_match_chance"])
        # Fed the recordings' own frames, the same model's outputs follow them: the ceiling
        # the free-running figure is read against.
        self.assertGreater(mean["text_match_teacher_forced"], 2 * mean["text_match_chance"])


if __name__ == "__main__":
    unittest.main()
