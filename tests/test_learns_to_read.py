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
import yaml

from myxtts.evaluate import guarded_main
from tests.data_samples import copy_sample_rows, write_metadata
from tests.device_harness import REPO, run_cli

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
        with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
            config = yaml.safe_load(f)
        # tiny.yaml widened a little and set up as configs/quick.yaml is (about one decoder
        # step per character, a constant diagonal prior): tiny itself does not read after a
        # few hundred steps.
        config["data"].update(val_fraction=0.0, batch_size=8)
        config["model"].update(d_model=64, prenet_dim=64, decoder_layers=2,
                               reduction_factor=4, max_decoder_steps=120)
        config["training"].update(validate_every_steps=STEPS, checkpoint_every_steps=STEPS,
                                  learning_rate=3e-3, warmup_steps=30, lr_schedule="constant",
                                  guided_attention_sigma=0.15, guided_attention_decay_steps=0)
        cls.config = os.path.join(cls.tmp, "tiny.yaml")
        with open(cls.config, "w", encoding="utf-8") as f:
            yaml.safe_dump(config, f)
        cls.run_dir = os.path.join(cls.tmp, "run")
        done = run_cli(["--config", cls.config, "--train-data", cls.data, "--checkpoint-dir",
                        cls.run_dir, "--max-steps", str(STEPS)])
        assert done.returncode == 0, done.stderr[-3000:]

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
