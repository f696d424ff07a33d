"""myxtts-evaluate: the JSON report holds every measure for each held-out sentence, every speaker
reference is another utterance of the same speaker (never the sentence itself), and user
errors are one paragraph with exit status 2, found before TensorFlow is imported."""

import collections
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

import pytest

from myxtts.data.metadata import DatasetError, read_metadata, split_rows
from myxtts.evaluate import guarded_main
from myxtts.evaluation.sentence_choice import (IN_SET, ZERO_SHOT, find_sentences,
                                               pick_sentences)
from myxtts.evaluation.free_running import SPEAKER_FIELDS, WER_KINDS
from myxtts.model_info import update_model_info
from myxtts.run_directory import SPLIT_FILE
from tests import children
from tests.data_samples import copy_sample_rows, write_metadata
from tests.judges import WHISPER_MISSING
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, SAMPLE_DIR,
                                     make_checkpoint, sample_tokenizer,
                                     shared_vocoder_checkpoint, tiny_inference_config)

MEAN_KEYS = {"length_ratio", "ended_by_stop", "focus", "monotonicity", "coverage", "mcd_own",
             "mcd_others", "text_match", "text_match_chance", "text_match_teacher_forced",
             "text_match_groups", "text_match_standard_error", "wer_synth",
             "wer_gt_vocoded", "wer_recording", "wer_teacher_forced", "cer_synth",
             "cer_gt_vocoded", "cer_recording", "cer_teacher_forced"}
UTTERANCE_KEYS = MEAN_KEYS - {"text_match_chance", "text_match_groups",
                              "text_match_standard_error"} | set(SPEAKER_FIELDS) | {
    "match_group", "match_among",
    "id", "speaker", "text", "language", "reference_id", "reference_audio", "tokens", "gt_frames",
    "synth_frames", "max_frames", "heard_synth", "heard_gt_vocoded", "heard_recording",
    "heard_teacher_forced"}
SPEAKER_SUMMARY_KEYS = {"judge", "not_measured_because", "speakers", "chance", "outputs",
                        "secs_own", "secs_others", "secs_gap", "speaker_match", "real",
                        "gap_ratio", "reference_decides", "per_speaker"}
JUDGE_INSTALLED = bool(importlib.util.find_spec("resemblyzer")
                       and importlib.util.find_spec("torch"))


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

    def report_of(self, name, *argv):
        """myxtts-evaluate on the test run with the test's decode limits, no recogniser and
        `argv`: its JSON report (written to `name`) and what it printed."""
        output = os.path.join(self.tmp, name)
        code, stdout, stderr = run_quietly([
            "--checkpoint-dir", self.checkpoint_dir, *argv, "--output", output,
            "--recognizer", "none", "--max-decoder-steps", str(MAX_DECODER_STEPS),
            "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS)])
        self.assertEqual(code, 0, stderr)
        with open(output, encoding="utf-8") as f:
            return json.load(f), stdout

    def test_the_report_has_every_measure_and_never_uses_the_sentence_as_reference(self):
        report, stdout = self.report_of("report.json", "--num", "3")
        self.assertEqual(report["num"], 3)
        self.assertTrue(report["checkpoint"].endswith("ckpt-1"))
        self.assertEqual(report["step"], 1)
        self.assertIn(SPLIT_FILE, report["sentences_from"])
        self.assertEqual(set(report["mean"]), MEAN_KEYS)
        self.assertIsNone(report["recognizer"])
        self.assertIn("--recognizer none", report["wer_not_measured_because"])
        self.assertEqual(len(report["utterances"]), 3)
        for utterance in report["utterances"]:
            self.assertEqual(set(utterance) - {"seconds"} - {f"{errors}_errors_{kind}"
                                               for errors in ("word", "char")
                                               for kind in WER_KINDS}, UTTERANCE_KEYS)
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
            self.assertIsInstance(utterance["text_match_teacher_forced"], bool)
        self.assertEqual(report["mean"]["ended_by_stop"], 0.0)
        self.assertAlmostEqual(report["mean"]["text_match_chance"], 1 / 3)
        self.assertIn("mean", stdout)
        self.assertIn("teacher-forced", stdout)
        self.assertIn("WER not measured", stdout)
        for utterance in report["utterances"]:
            self.assertIn(utterance["id"], stdout)
        self.assertEqual(report["mode"], "in-set")
        self.assertEqual(report["vocoder"], f"griffin-lim ({GRIFFIN_LIM_ITERS} iterations)")
        self.check_speaker_measures(report, stdout, ["anna", "ben"])

    def check_speaker_measures(self, report, stdout, speakers):
        """Each sentence also said in the other speaker's voice, and judged when the judge is
        installed."""
        speaker = report["speaker"]
        if not JUDGE_INSTALLED:
            self.assertIn("not installed", speaker["not_measured_because"])
            self.assertIn("Speaker similarity not measured", stdout)
            return
        self.assertEqual(set(speaker), SPEAKER_SUMMARY_KEYS)
        self.assertIn("resemblyzer", speaker["judge"])
        self.assertIsNone(speaker["not_measured_because"])
        self.assertEqual(speaker["speakers"], speakers)
        self.assertEqual(speaker["chance"], 1 / len(speakers))
        self.assertEqual(speaker["outputs"], 2 * report["num"])
        self.assertEqual(set(speaker["per_speaker"]), set(speakers))
        self.assertEqual(speaker["real"]["recordings"],
                         len({u[key] for u in report["utterances"]
                              for key in ("id", "reference_id", "cross_reference_id")}))
        for utterance in report["utterances"]:
            self.assertNotEqual(utterance["cross_speaker"], utterance["speaker"])
            self.assertIn(utterance["cross_speaker"], speakers)
            for key in ("secs_own", "secs_others", "cross_secs_own", "cross_secs_others"):
                self.assertTrue(-1.0 <= utterance[key] <= 1.0, (key, utterance[key]))
            for key in ("speaker_match", "cross_speaker_match", "reference_decides"):
                self.assertIsInstance(utterance[key], bool)
        self.assertIn("reference decides", stdout)
        for name in speakers:
            self.assertIn(name, stdout)

    def test_without_the_judge_the_evaluation_runs_and_says_why(self):
        output = os.path.join(self.tmp, "no_judge.json")
        with mock.patch.dict(sys.modules, {"resemblyzer": None}):  # as if not installed
            code, stdout, stderr = run_quietly([
                "--checkpoint-dir", self.checkpoint_dir, "--num", "2", "--output", output,
                "--recognizer", "none", "--max-decoder-steps", str(MAX_DECODER_STEPS),
                "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS)])
        self.assertEqual(code, 0, stderr)
        with open(output, encoding="utf-8") as f:
            report = json.load(f)
        self.assertIsNone(report["speaker"]["judge"])
        self.assertIn("resemblyzer is not installed", report["speaker"]["not_measured_because"])
        self.assertIn("Speaker similarity not measured: resemblyzer is not installed", stdout)
        for utterance in report["utterances"]:
            self.assertTrue(all(utterance[key] is None for key in SPEAKER_FIELDS), utterance)

    def test_zero_shot_speakers_judged_on_the_neural_vocoder_audio(self):
        vocoder_dir, _ = shared_vocoder_checkpoint()
        data = os.path.join(self.tmp, "new_voices")
        write_metadata(data, [line.replace("|anna|", "|carl|").replace("|ben|", "|dora|")
                              for line in copy_sample_rows(data, 6)])
        output = os.path.join(self.tmp, "zero_shot.json")
        code, stdout, stderr = run_quietly([
            "--checkpoint-dir", self.checkpoint_dir, "--data", data, "--num", "2",
            "--vocoder-dir", vocoder_dir, "--output", output, "--recognizer", "none",
            "--max-decoder-steps", str(MAX_DECODER_STEPS)])
        self.assertEqual(code, 0, stderr)
        with open(output, encoding="utf-8") as f:
            report = json.load(f)
        self.assertEqual(report["mode"], "zero-shot")
        self.assertIn(vocoder_dir, report["vocoder"])
        self.assertIn("HiFi-GAN", report["vocoder"])
        by_speaker = {u["speaker"]: u for u in report["utterances"]}
        self.assertEqual(sorted(by_speaker), ["carl", "dora"])
        # One reference per speaker; the other speaker's is the cross reference.
        self.assertEqual(by_speaker["carl"]["cross_reference_id"],
                         by_speaker["dora"]["reference_id"])
        self.assertEqual(by_speaker["dora"]["cross_reference_id"],
                         by_speaker["carl"]["reference_id"])
        self.check_speaker_measures(report, stdout, ["carl", "dora"])

    def test_adapted_to_each_reference_the_outputs_change_and_the_report_says_so(self):
        data = os.path.join(self.tmp, "adapted_voices")
        write_metadata(data, [line.replace("|anna|", "|carl|").replace("|ben|", "|dora|")
                              for line in copy_sample_rows(data, 6)])
        plain, _ = self.report_of("plain.json", "--data", data, "--num", "2")
        adapted, stdout = self.report_of("adapted.json", "--data", data, "--num", "2",
                                         "--adapt-steps", "2", "--adapt-learning-rate", "1e-3",
                                         "--adapt-part", "postnet")
        self.assertIsNone(plain["adaptation"])
        self.assertEqual(adapted["adaptation"],
                         {"steps": 2, "learning_rate": 1e-3, "part": "postnet"})
        self.assertIn("Each reference's voice adapted first: 2 steps of the postnet weights at "
                      "learning rate 0.001", stdout)
        # the postnet alone moved: every decode wrote as many frames as without adaptation
        self.assertEqual([u["synth_frames"] for u in adapted["utterances"]],
                         [u["synth_frames"] for u in plain["utterances"]])
        self.assertEqual([u["reference_id"] for u in adapted["utterances"]],
                         [u["reference_id"] for u in plain["utterances"]])
        # the references' voices were fitted: other outputs (their distances to the recordings)
        self.assertNotEqual([u["mcd_own"] for u in adapted["utterances"]],
                            [u["mcd_own"] for u in plain["utterances"]])
        self.check_speaker_measures(adapted, stdout, ["carl", "dora"])

    @unittest.skipIf(WHISPER_MISSING, WHISPER_MISSING)
    def test_whisper_hears_the_recordings_beside_the_outputs_and_says_what_it_heard(self):
        data = os.path.join(self.tmp, "heard")
        write_metadata(data, copy_sample_rows(data, 6))
        output = os.path.join(self.tmp, "heard.json")
        code, stdout, stderr = run_quietly([
            "--checkpoint-dir", self.checkpoint_dir, "--data", data, "--num", "3", "--output",
            output, "--recognizer", "whisper", "--speaker-judge", "none",
            "--max-decoder-steps", str(MAX_DECODER_STEPS),
            "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS)])
        self.assertEqual(code, 0, stderr)
        with open(output, encoding="utf-8") as f:
            report = json.load(f)
        self.assertTrue(report["recognizer"].startswith("whisper (English-only"), report)
        self.assertIsNone(report["wer_not_measured_because"])
        mean = report["mean"]
        # The recordings (espeak-ng) are heard; a model trained one step says no words.
        self.assertLessEqual(mean["wer_recording"], 0.5, report["utterances"])
        self.assertGreaterEqual(mean["wer_synth"], 0.8, report["utterances"])
        self.assertLess(mean["cer_recording"], mean["cer_synth"])
        for utterance in report["utterances"]:
            for kind in WER_KINDS:
                self.assertIsInstance(utterance[f"heard_{kind}"], str)
                self.assertIsNotNone(utterance[f"cer_{kind}"])
        self.assertIn(f"Heard by {report['recognizer']}: WER {mean['wer_synth']:.2f}", stdout)
        self.assertIn(f"{mean['wer_teacher_forced']:.2f} ({mean['cer_teacher_forced']:.2f}) "
                      f"teacher-forced", stdout)
        first = report["utterances"][0]
        self.assertIn(f"said  {first['text']!r}", stdout)
        self.assertIn(f"heard {first['heard_synth']!r}", stdout)

    def test_match_among_judges_each_output_within_its_group(self):
        data = os.path.join(self.tmp, "held_out_groups")
        write_metadata(data, copy_sample_rows(data, 6))
        report, stdout = self.report_of("groups.json", "--data", data, "--num", "4",
                                        "--match-among", "2", "--speaker-judge", "none")
        self.assertEqual(report["match_among"], 2)
        rows = report["utterances"]
        self.assertEqual([u["match_group"] for u in rows], [0, 0, 1, 1])
        self.assertEqual({u["match_among"] for u in rows}, {2})
        mean = report["mean"]
        self.assertEqual(mean["text_match_chance"], 0.5)
        self.assertEqual(mean["text_match_groups"],
                         [sum(u["text_match"] for u in rows[g:g + 2]) / 2 for g in (0, 2)])
        self.assertAlmostEqual(mean["text_match"], sum(mean["text_match_groups"]) / 2)
        self.assertIsNotNone(mean["text_match_standard_error"])
        self.assertIn("Text match in 2 groups of 2-2 sentences", stdout)

    def test_user_errors_are_one_paragraph_with_status_2(self):
        empty = os.path.join(self.tmp, "empty_data")
        os.makedirs(os.path.join(empty, "wavs"), exist_ok=True)
        no_info = os.path.join(self.tmp, "run_without_info")
        if not os.path.isdir(no_info):
            shutil.copytree(self.checkpoint_dir, no_info,
                            ignore=shutil.ignore_patterns("model_info.json"))
        cases = [
            (["--checkpoint-dir", self.checkpoint_dir, "--num", "0"], "--num 0"),
            (["--checkpoint-dir", self.checkpoint_dir, "--match-among", "1"],
             "--match-among 1"),
            (["--checkpoint-dir", os.path.join(self.tmp, "nope")], "does not exist"),
            (["--checkpoint-dir", self.checkpoint_dir, "--data", empty], "metadata.csv"),
            (["--checkpoint-dir", no_info], "--data DIR"),
            (["--checkpoint-dir", self.checkpoint_dir, "--checkpoint", "ckpt-99",
              "--recognizer", "none"], "ckpt-99"),
            (["--checkpoint-dir", self.checkpoint_dir, "--vocoder-checkpoint", "best"],
             "--vocoder-checkpoint needs --vocoder-dir"),
            (["--checkpoint-dir", self.checkpoint_dir, "--adapt-steps", "-2"],
             "--adapt-steps -2 must be 0"),
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

    def pick(self, folder, num):
        sentences = find_sentences(self.config, self.run_dir, folder, self.info)
        tokenizer = sample_tokenizer(self.config.data.text_cleaners)
        picks, _ = pick_sentences(sentences, self.config, tokenizer, num=num, seed=3)
        return sentences, picks

    def test_a_folder_of_training_speakers_is_in_set_spread_evenly_with_cross_references(self):
        other = os.path.join(self.tmp, "same_speakers")
        write_metadata(other, copy_sample_rows(other, 12))  # anna and ben, 6 each
        sentences, picks = self.pick(other, num=5)
        self.assertEqual(sentences.mode, IN_SET)
        by_speaker = collections.Counter(p.item.speaker for p in picks)
        self.assertEqual(by_speaker, {"anna": 3, "ben": 2})  # in turn, by name
        references = {p.item.speaker: set() for p in picks}
        for p in picks:
            references[p.item.speaker].add(p.reference.id)
        for p in picks:
            self.assertNotEqual(p.reference.id, p.item.id)
            self.assertEqual(p.reference.speaker, p.item.speaker)
            self.assertNotEqual(p.cross_reference.speaker, p.item.speaker)
            self.assertIn(p.cross_reference.id, references[p.cross_reference.speaker])

    def test_new_speakers_are_zero_shot_with_one_3_to_8_second_reference_each(self):
        other = os.path.join(self.tmp, "new_speakers")
        lines = [line.replace("|anna|", "|carl|").replace("|ben|", "|dora|")
                 for line in copy_sample_rows(other, 12)]
        write_metadata(other, lines)
        sentences, picks = self.pick(other, num=20)
        self.assertEqual(sentences.mode, ZERO_SHOT)
        references = {p.item.speaker: p.reference for p in picks}
        self.assertEqual(len(picks), 10)  # every row but the two references
        for p in picks:
            self.assertIs(p.reference, references[p.item.speaker])
            self.assertIs(p.cross_reference, references[p.cross_reference.speaker])
            self.assertNotEqual(p.cross_reference.speaker, p.item.speaker)
        self.assertEqual(sorted(references), ["carl", "dora"])
        for reference in references.values():
            seconds = reference.num_samples / self.config.data.sample_rate
            self.assertTrue(3.0 <= seconds <= 8.0, seconds)
            self.assertNotIn(reference.id, [p.item.id for p in picks])
        # The same seed, the same choice.
        self.assertEqual(self.pick(other, num=20)[1], picks)

    def test_no_held_out_sentence_is_a_clear_error(self):
        config = self.config.override({"data.val_fraction": 0.0}, source="test")
        sentences = find_sentences(config, self.run_dir, None, self.info)
        self.assertEqual(sentences.held_out, [])
        with self.assertRaisesRegex(DatasetError, "No usable held-out sentence"):
            pick_sentences(sentences, config, sample_tokenizer(config.data.text_cleaners), 3, 0)


class EvaluateArgumentsTest(unittest.TestCase):
    def test_arguments_are_checked_before_tensorflow_is_imported(self):
        done = subprocess.run(children.command("evaluate", "--checkpoint-dir", "/nonexistent/run",
                                               "--num", "2"),
                              capture_output=True, text=True, check=False, cwd=children.REPO)
        self.assertEqual(done.stdout.split(), ["2", "False"], done.stderr)
        self.assertIn("--checkpoint-dir /nonexistent/run does not exist", done.stderr)


if __name__ == "__main__":
    unittest.main()
