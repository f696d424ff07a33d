"""`python train_main.py --validate-only`: table and statistics, exit 0 when enough rows remain,
non-zero with the reason otherwise."""

import json
import os
import tempfile
import unittest

import pytest

from tests.data_samples import SAMPLE_DIR
from tests.device_harness import run_cli


def _config(tmp, **data):
    path = os.path.join(tmp, "config.yaml")
    lines = [f"training:\n  checkpoint_dir: {os.path.join(tmp, 'run')}\n", "data:\n"]
    lines += [f"  {k}: {json.dumps(v)}\n" for k, v in data.items()]
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines if data else lines[:1])
    return path


@pytest.mark.slow
class ValidateOnlyTest(unittest.TestCase):
    def test_sample_dataset_validates(self):
        with tempfile.TemporaryDirectory() as tmp:
            # tiny.yaml's data settings, checkpoint dir in tmp
            config = _config(tmp, sample_rate=16000, n_fft=512, win_length=512, n_mels=40,
                             fmax=7600.0, max_audio_seconds=8.0, text_cleaners="multilingual",
                             languages=["en", "de", "es"])
            proc = run_cli(["--train-data", SAMPLE_DIR, "--config", config, "--validate-only",
                            "--batch-size", "2"])
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            self.assertIn("Dataset validation", proc.stdout)
            self.assertIn("(no problems found)", proc.stdout)
            self.assertIn("speakers: anna", proc.stdout)
            with open(os.path.join(tmp, "run", "model_info.json"), encoding="utf-8") as f:
                info = json.load(f)["dataset"]
            self.assertEqual(info["train"]["utterances"] + info["val"]["utterances"], 58)
            self.assertEqual(set(info["train"]["languages"]), {"en", "de", "es"})

    def test_unusable_dataset_exits_nonzero_with_the_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            # default config: English only, so the de/es rows are skipped; too few remain
            config = _config(tmp, min_train_items=100, sample_rate=16000)
            proc = run_cli(["--train-data", SAMPLE_DIR, "--config", config, "--validate-only"])
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn("min_train_items", proc.stderr)
            self.assertIn("unknown_language", proc.stderr)
            # A run that never started leaves no run directory behind.
            self.assertFalse(os.path.exists(os.path.join(tmp, "run")))
            missing = os.path.join(tmp, "no_such_dataset")
            proc = run_cli(["--train-data", missing, "--config", config, "--validate-only"])
            self.assertNotEqual(proc.returncode, 0)
            self.assertIn(missing, proc.stderr)


if __name__ == "__main__":
    unittest.main()
