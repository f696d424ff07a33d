"""myxtts-evaluate: the JSON report holds every measure for each held-out sentence, every speaker
reference is another utterance of the same speaker (never the sentence itself), and user
errors are one paragraph with exit status 2, found before TensorFlow is imported."""

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import librosa
import pytest

from myxtts.data.metadata import DatasetError, read_metadata, split_rows
from myxtts.evaluate import guarded_main
from myxtts.evaluation.free_running import find_sentences, pick_sentences
from myxtts.evaluation.metrics import word_error_rate
from myxtts.evaluation.recognizer import RecognizerUnavailableError, load_recognizer
from myxtts.model_info import update_model_info
from myxtts.run_directory import SPLIT_FILE
from tests import children
from tests.data_samples import copy_sample_rows, speech, write_metadata
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, SAMPLE_DIR,
                                     make_checkpoint, sample_tokenizer,
                                     tiny_inference_config)

MEAN_KEYS = {"length_ratio", "ended_by_stop", "focus", "monotonicity", "coverage", "mcd_own",
             "mcd_others", "text_match", "text_match_chance", "wer_synth",
             "wer_gt_griffin_lim", "wer_recording"}
UTTERANCE_KEYS = MEAN_KEYS - {"text_match_chance"} | {
    "id", "speaker", "text", "reference_id", "reference_audio", "tokens", "gt_frames",
    "synth_frames", "max_frames", "heard_synth", "heard_gt_griffin_lim", "heard_recording"}


def run_quietly(argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = guarded_main(argv)
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.mark.slow
class EvaluateCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-evaluate-test-")
        cls.checkpoint_dir = os.path.join(cls.tmp, "run")
        make_checkpoint(cls.checkpoint_dir)
        # What training records: its data folder and the saved split, 10% held out.
        config = tiny_inference_config(cls.checkpoint_dir)
        rows, _ = read_metadata(os.path.join(SAMPLE_DIR, "metadata.csv"), "sample", "en")
        _, val = split_rows(rows, 0.1, config.data.seed, os.path.join(cls.checkpoint_dir,
                                                                       SPLIT_FILE))
        cls.val_ids = {r.id for r in val}
        cls.speakers = {r.id: r.speaker for r in rows}
        update_model_info(cls.checkpoint_dir, dataset={
            "train_metadata": os.path.join(SAMPLE_DIR, "metadata.csv")})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_report_has_every_measure_and_never_uses_the_sentence_as_reference(self):
        output = os.path.join(self.tmp, "report.json")
        code, stdout, stderr = run_quietly([
            "--checkpoint-dir", self.checkpoint_dir, "--num", "3", "--output", output,
            "--recognizer", "none", "--max-decoder-steps", str(MAX_DECODER_STEPS),
            "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS)])
        self.assertEqual(code, 0, stderr)
        with open(output, encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(report["num"], 3)
        self.assertTrue(report["checkpoint"].endswith("ckpt-1"))
        self.assertEqual(report["step"], 1)
        self.assertIn(SPLIT_FILE, report["sentences_from"])
        self.assertEqual(set(report["mean"]), MEAN_KEYS)
        self.assertIsNone(report["recognizer"])
        self.assertIn("--recognizer none", report["wer_not_measured_because"])
        self.assertEqual(len(report["utterances"]), 3)
        for utterance in report["utterances"]:
            self.assertEqual(set(utterance) - {"seconds", "word_errors_synth",
                                               "word_errors_gt_griffin_lim",
                                               "word_errors_recording"}, UTTERANCE_KEYS)
            self.assertIn(utterance["id"], self.val_ids)
            self.assertNotEqual(utterance["reference_id"], utterance["id"])
            self.assertEqual(self.speakers[utterance["reference_id"]], utterance["speaker"])
            self.assertAlmostEqual(utterance["length_ratio"],
                                   utterance["synth_frames"] / utterance["gt_frames"])
            # The test config's stop threshold makes every decode run to the length cap.
            self.assertFalse(utterance["ended_by_stop"])
            self.assertEqual(utterance["synth_frames"], utterance["max_frames"])
            self.assertGreater(utterance["mcd_own"], 0.0)
            self.assertGreater(utterance["focus"], 0.0)
            self.assertIsInstance(utterance["text_match"], bool)
        self.assertEqual(report["mean"]["ended_by_stop"], 0.0)
        self.assertAlmostEqual(report["mean"]["text_match_chance"], 1 / 3)
        self.assertIn("mean", stdout)
        self.assertIn("WER not measured", stdout)
        for utterance in report["utterances"]:
            self.assertIn(utterance["id"], stdout)

    def test_user_errors_are_one_paragraph_with_status_2(self):
        empty = os.path.join(self.tmp, "empty_data")
        os.makedirs(os.path.join(empty, "wavs"), exist_ok=True)
        no_info = os.path.join(self.tmp, "run_without_info")
        if not os.path.isdir(no_info):
            shutil.copytree(self.checkpoint_dir, no_info,
                            ignore=shutil.ignore_patterns("model_info.json"))
        cases = [
            (["--checkpoint-dir", self.checkpoint_dir, "--num", "0"], "--num 0"),
            (["--checkpoint-dir", os.path.join(self.tmp, "nope")], "does not exist"),
            (["--checkpoint-dir", self.checkpoint_dir, "--data", empty], "metadata.csv"),
            (["--checkpoint-dir", no_info], "--data DIR"),
            (["--checkpoint-dir", self.checkpoint_dir, "--checkpoint", "ckpt-99",
              "--recognizer", "none"], "ckpt-99"),
        ]
        for argv, expected in cases:
            with self.subTest(argv=argv):
                code, _, stderr = run_quietly(argv)
                self.assertEqual(code, 2)
                self.assertTrue(stderr.startswith("error: "), stderr)
                self.assertIn(expected, stderr)
                self.assertNotIn("Traceback", stderr)
                self.assertEqual(stderr.strip().count("\n"), 0, stderr)


class SentenceChoiceTest(unittest.TestCase):
    """Which rows are held out; nothing is written into the checkpoint directory."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="myxtts-evaluate-rows-")
        self.run_dir = os.path.join(self.tmp, "run")
        os.makedirs(self.run_dir)
        self.config = tiny_inference_config(self.run_dir)
        self.rows, _ = read_metadata(os.path.join(SAMPLE_DIR, "metadata.csv"), "sample", "en")
        self.info = {"dataset": {"train_metadata": os.path.join(SAMPLE_DIR, "metadata.csv")}}

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_the_training_data_gives_the_saved_validation_split(self):
        _, val = split_rows(self.rows, 0.2, 7, os.path.join(self.run_dir, SPLIT_FILE))
        sentences = find_sentences(self.config, self.run_dir, None, self.info)
        self.assertEqual([r.id for r in sentences.held_out], [r.id for r in val])
        self.assertEqual(len(sentences.held_out) + len(sentences.others), len(self.rows))
        self.assertEqual(os.path.realpath(sentences.data_dir), os.path.realpath(SAMPLE_DIR))

    def test_without_a_saved_split_the_seeded_split_is_recomputed_and_not_saved(self):
        d = self.config.data
        _, val = split_rows(self.rows, d.val_fraction, d.seed, None)
        sentences = find_sentences(self.config, self.run_dir, SAMPLE_DIR, {})
        self.assertEqual([r.id for r in sentences.held_out], [r.id for r in val])
        self.assertEqual(os.listdir(self.run_dir), [])

    def test_another_data_folder_is_held_out_whole(self):
        other = os.path.join(self.tmp, "other_corpus")
        shutil.copytree(SAMPLE_DIR, other, ignore=shutil.ignore_patterns(".myxtts_cache"))
        sentences = find_sentences(self.config, self.run_dir, other, self.info)
        self.assertEqual(len(sentences.held_out), len(self.rows))
        self.assertEqual(sentences.others, [])
        self.assertIn("not this run's training data", sentences.source)

    def test_references_are_other_utterances_of_the_same_speaker(self):
        other = os.path.join(self.tmp, "three")
        write_metadata(other, copy_sample_rows(other, 3))  # S001 anna, S002 ben, S003 anna
        sentences = find_sentences(self.config, self.run_dir, other, self.info)
        tokenizer = sample_tokenizer(self.config.data.text_cleaners)
        picks, lonely = pick_sentences(sentences, self.config, tokenizer, num=5, seed=0)
        self.assertEqual(lonely, ["S002"])
        self.assertEqual(sorted((p.item.id, p.reference.id) for p in picks),
                         [("S001", "S003"), ("S003", "S001")])

    def test_no_held_out_sentence_is_a_clear_error(self):
        config = self.config.override({"data.val_fraction": 0.0}, source="test")
        sentences = find_sentences(config, self.run_dir, None, self.info)
        self.assertEqual(sentences.held_out, [])
        with self.assertRaisesRegex(DatasetError, "No usable held-out sentence"):
            pick_sentences(sentences, config, sample_tokenizer(config.data.text_cleaners), 3, 0)


class RecognizerTest(unittest.TestCase):
    def test_no_wer_without_the_package_for_other_languages_or_when_not_asked(self):
        with mock.patch.dict(sys.modules, {"pocketsphinx": None}):  # as if not installed
            recognizer, why = load_recognizer("auto", ["en"])
            self.assertIsNone(recognizer)
            self.assertIn("pocketsphinx is not installed", why)
            with self.assertRaisesRegex(RecognizerUnavailableError, "not installed"):
                load_recognizer("pocketsphinx", ["en"])
        recognizer, why = load_recognizer("auto", ["en", "de"])
        self.assertIsNone(recognizer)
        self.assertIn("only has an English model", why)
        self.assertIn("de", why)
        self.assertEqual(load_recognizer("none", ["en"]), (None, "not asked for"))

    @pytest.mark.slow
    @unittest.skipUnless(importlib.util.find_spec("pocketsphinx"), "pocketsphinx not installed")
    def test_pocketsphinx_hears_a_real_recording_resampled_to_16k(self):
        recognizer, why = load_recognizer("auto", ["en"])
        self.assertIsNotNone(recognizer, why)
        text = "In the beginning God created the heaven and the earth."
        at_22k = librosa.resample(speech("S001"), orig_sr=16000, target_sr=22050)
        self.assertLess(word_error_rate(text, recognizer.transcribe(at_22k, 22050)), 0.5)


class EvaluateArgumentsTest(unittest.TestCase):
    def test_arguments_are_checked_before_tensorflow_is_imported(self):
        done = subprocess.run(children.command("evaluate", "--checkpoint-dir", "/nonexistent/run",
                                               "--num", "2"),
                              capture_output=True, text=True, check=False, cwd=children.REPO)
        self.assertEqual(done.stdout.split(), ["2", "False"], done.stderr)
        self.assertIn("--checkpoint-dir /nonexistent/run does not exist", done.stderr)


if __name__ == "__main__":
    unittest.main()
