"""Corpora as they come: LibriTTS, VCTK and Common Voice folders (written by tests/corpus_layouts.py
from the sample's real speech) give the rows, speakers and languages of their layout; their
faults are counted skips; a folder no layout fits says what was looked for; each layout
validates and trains configs/tiny.yaml in a real `train_main.py` process.

    python -m pytest tests/test_corpora.py -v
"""

import json
import os
import shutil
import tempfile
import unittest

import pytest

from myxtts.data import corpora
from myxtts.data.metadata import DatasetError
from myxtts.data.prepare import prepare_dataset
from tests import corpus_layouts
from tests.data_samples import SAMPLE_DIR, tiny_config
from tests.device_harness import run_cli

WRITERS = {"libritts": corpus_layouts.write_libritts, "vctk": corpus_layouts.write_vctk,
           "commonvoice": corpus_layouts.write_commonvoice}


def _speakers(prepared):
    return {it.speaker for items in prepared.items.values() for it in items}


class LayoutsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.tmp)

    def _corpus(self, layout):
        root = os.path.join(self.tmp, layout)
        os.makedirs(root)
        usable = WRITERS[layout](root)
        return root, usable

    def _prepare(self, root, **data):
        work = os.path.join(self.tmp, "run")
        return prepare_dataset(tiny_config(**data), root, work_dir=work)

    def test_libritts_rows_speakers_and_faults(self):
        root, usable = self._corpus("libritts")
        self.assertEqual(corpora.detect(root), "libritts")
        prepared = self._prepare(root)
        counts = prepared.report.counts()
        self.assertEqual(sum(counts["missing_file"].values()), 2)
        self.assertEqual(counts["no_transcript"]["train"], 2)
        items = [it for split in prepared.items.values() for it in split]
        self.assertEqual(len(items), usable)
        self.assertEqual(_speakers(prepared), {"19", "26"})
        # The normalized text, from the trans.tsv (third column) and the .normalized.txt files.
        texts = {it.text for it in items}
        self.assertIn("in the beginning god created the heaven and the earth.", texts)
        self.assertFalse(any("original" in t for t in texts))
        self.assertTrue(any("_200_" in it.id for it in items))

    def test_vctk_reads_mic1_by_default_and_mic2_when_asked(self):
        root, usable = self._corpus("vctk")
        prepared = self._prepare(root)
        items = {it.id: it for split in prepared.items.values() for it in split}
        self.assertEqual(len(items), usable)
        self.assertEqual(_speakers(prepared), {"p225", "p226"})
        self.assertTrue(all(it.audio_path.endswith("_mic1.flac") for it in items.values()))
        counts = prepared.report.counts()
        self.assertEqual(sum(counts["missing_file"].values()), 2)
        self.assertEqual(counts["no_transcript"]["train"], 2)
        shutil.rmtree(os.path.join(self.tmp, "run"))
        mic2 = self._prepare(root, vctk_mic="mic2")
        paths = [it.audio_path for split in mic2.items.values() for it in split]
        self.assertEqual(len(paths), usable)
        self.assertTrue(all(p.endswith("_mic2.flac") for p in paths))

    def test_commonvoice_validated_tsv_speakers_languages_and_down_votes(self):
        root, usable = self._corpus("commonvoice")
        self.assertEqual(corpora.find_source(root, "train"), os.path.join(root, "validated.tsv"))
        self.assertEqual(corpora.find_source(root, "val"), os.path.join(root, "dev.tsv"))
        prepared = self._prepare(root)
        counts = prepared.report.counts()
        self.assertEqual(counts["down_voted"]["train"], 1)
        self.assertEqual(counts["wrong_columns"]["train"], 1)
        items = [it for split in prepared.items.values() for it in split]
        self.assertEqual(len(items), usable)
        self.assertEqual(_speakers(prepared), set(corpus_layouts.CV_CLIENTS.values()))
        self.assertTrue(all(it.audio_path.endswith(".mp3") for it in items))
        self.assertEqual(set(prepared.report.to_dict()["train"]["languages"]), {"en"})

    def test_commonvoice_split_files_named(self):
        root, _ = self._corpus("commonvoice")
        work = os.path.join(self.tmp, "run")
        prepared = prepare_dataset(tiny_config(), os.path.join(root, "train.tsv"),
                                   val_dir=os.path.join(root, "dev.tsv"), work_dir=work)
        self.assertEqual(len(prepared.items["val"]), 2)
        self.assertEqual(len(prepared.items["train"]), 13)  # 14 train rows, one down-voted
        self.assertEqual(prepared.val_source, os.path.abspath(os.path.join(root, "dev.tsv")))

    def test_a_changed_transcript_is_validated_again(self):
        root, _ = self._corpus("libritts")
        self._prepare(root)
        self.assertIsNotNone(self._reused(root))
        tsv = os.path.join(root, "19", "100", "19_100.trans.tsv")
        with open(tsv, encoding="utf-8") as f:
            text = f.read()
        with open(tsv, "w", encoding="utf-8") as f:
            f.write(text.replace("In the beginning", "At the start"))
        prepared = self._prepare(root)
        texts = {it.text for split in prepared.items.values() for it in split}
        self.assertIn("at the start god created the heaven and the earth.", texts)

    def _reused(self, root):
        from myxtts.data import saved_validation  # pylint: disable=import-outside-toplevel
        with self.assertLogs("myxtts.data", "INFO") as logs:
            self._prepare(root)
        return next((line for line in logs.output if saved_validation.FILE in line), None)

    def test_a_folder_no_layout_fits_says_what_was_looked_for(self):
        folder = os.path.join(self.tmp, "notes")
        os.makedirs(os.path.join(folder, "sub"))
        with open(os.path.join(folder, "readme.txt"), "w") as f:
            f.write("nothing here")
        with self.assertRaises(DatasetError) as e:
            corpora.find_source(folder, "train")
        for layout in ("LibriTTS", "VCTK", "Common Voice"):
            self.assertIn(layout, str(e.exception))
        with self.assertRaises(DatasetError) as e:
            corpora.find_source(folder, "train", "vctk")
        self.assertIn("txt/ + wav48_silence_trimmed/", str(e.exception))

    def test_format_named_must_match_and_libritts_root_names_its_subsets(self):
        root, _ = self._corpus("vctk")
        with self.assertRaises(DatasetError) as e:
            corpora.find_source(root, "train", "libritts")
        self.assertIn("holds a vctk layout", str(e.exception))
        self.assertEqual(corpora.find_source(root, "train", "vctk"), root)
        release = os.path.join(self.tmp, "LibriTTS")
        corpus_layouts.write_libritts(os.path.join(release, "train-clean-100"), per_speaker=2)
        os.makedirs(os.path.join(release, "dev-clean"))
        with self.assertRaises(DatasetError) as e:
            corpora.find_source(release, "train")
        self.assertIn(f"--train-data {os.path.join(release, 'dev-clean')}", str(e.exception))
        self.assertIn("train-clean-100", str(e.exception))
        self.assertEqual(corpora.detect(SAMPLE_DIR), "ljspeech")


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_each_layout_validates_and_trains_in_train_main(layout, tmp_path):
    root = tmp_path / layout
    root.mkdir()
    WRITERS[layout](str(root))
    run = tmp_path / "run"
    fault = {"libritts": "no_transcript", "vctk": "no_transcript",
             "commonvoice": "down_voted"}[layout]
    if layout == "commonvoice":  # --validate-only once: training logs the same table
        proc = run_cli(["--config", "configs/tiny.yaml", "--train-data", str(root),
                        "--validate-only", "--checkpoint-dir", str(run)])
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "Dataset validation" in proc.stdout
        assert fault in proc.stdout
    proc = run_cli(["--config", "configs/tiny.yaml", "--train-data", str(root),
                    "--checkpoint-dir", str(run), "--max-steps", "2", "--noxla"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = proc.stdout + proc.stderr
    assert "Dataset validation" in table and fault in table
    with open(run / "model_info.json", encoding="utf-8") as f:
        info = json.load(f)
    assert info["dataset"]["train_metadata"] == os.path.abspath(
        corpora.find_source(str(root), "train"))
    assert os.path.isfile(run / "checkpoint")
