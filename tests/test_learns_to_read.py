"""The project's central claim at test scale: a model trained a few hundred steps with the real
CLI on a tiny corpus says *its own* sentence. `myxtts-evaluate` synthesises each sentence
free-running and matches it (DTW mel-cepstral distance) against every sentence's recording;
the own recording must be the nearest more often than chance. (docs/results.md has the
full-size figures.)

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
from tests.data_samples import copy_sample_rows, write_metadata
from tests.device_harness import train_tiny_reader

STEPS = 400
SENTENCES = 24


@pytest.mark.slow
class LearnsToReadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-learns-")
        # 24 English sentences of the bundled sample (two espeak-ng voices).
        cls.data = os.path.join(cls.tmp, "data")
        write_metadata(cls.data, copy_sample_rows(cls.data, 24))
        cls.run_dir = train_tiny_reader(cls.tmp, cls.data, STEPS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_free_running_speech_is_nearest_to_its_own_sentence_more_often_than_chance(self):
        # The same sentences in another folder: evaluate holds every row out and picks each
        # one's reference among the other utterances of its speaker.
        judged = os.path.join(self.tmp, "judged")
        write_metadata(judged, copy_sample_rows(judged, 24))
        output = os.path.join(self.tmp, "report.json")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = guarded_main(["--checkpoint-dir", self.run_dir, "--data", judged, "--num",
                                 str(SENTENCES), "--recognizer", "none", "--speaker-judge", "none",
                                 "--output", output])
        self.assertEqual(code, 0)
        with open(output, encoding="utf-8") as f:
            mean = json.load(f)["mean"]
        self.assertAlmostEqual(mean["text_match_chance"], 1 / SENTENCES)
        self.assertGreater(mean["text_match"], 2 * mean["text_match_chance"])


if __name__ == "__main__":
    unittest.main()
