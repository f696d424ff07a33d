"""Validation: one test per rule — the broken row is reported (with its path) and is not in the
training data — plus the fail policy, the summary table, missing folders and the saved split."""

import contextlib
import io
import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

import numpy as np
import soundfile as sf

from myxtts.data import metadata, validation
from myxtts.data.metadata import DatasetError
from myxtts.data.prepare import prepare_dataset
from myxtts.data.validation import DatasetValidationError
from myxtts.evaluate import guarded_main as evaluate_command
from myxtts.evaluation.sentence_choice import find_sentences
from myxtts.model_info import read_model_info, update_model_info
from tests.data_samples import copy_sample_rows, speech, tiny_config, write_metadata

GOOD = 8  # real utterances copied from the bundled sample


def _write(directory, uid, samples, rate=16000, ext="wav", subtype=None):
    path = os.path.join(directory, "wavs", f"{uid}.{ext}")
    sf.write(path, samples, rate, subtype=subtype)
    return path


def build_broken_dataset(directory):
    """GOOD real rows, then one row (or line) per validation rule."""
    lines = copy_sample_rows(directory, GOOD)
    voice = speech("S001")
    w = os.path.join(directory, "wavs")
    lines.append("bad_missing|A file that is not there.|A file that is not there.|anna|en")
    with open(os.path.join(w, "bad_garbage.wav"), "wb") as f:
        f.write(b"this is not audio at all" * 40)
    lines.append("bad_garbage|Garbage bytes.|Garbage bytes.|anna|en")
    _write(directory, "bad_truncated", voice)
    path = os.path.join(w, "bad_truncated.wav")
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])
    lines.append("bad_truncated|A truncated file.|A truncated file.|anna|en")
    _write(directory, "bad_empty", np.zeros(0, np.float32), subtype="PCM_16")
    lines.append("bad_empty|An empty file.|An empty file.|anna|en")
    nan = voice.copy()
    nan[1000:1010] = np.nan
    _write(directory, "bad_nan", nan, subtype="FLOAT")
    lines.append("bad_nan|Not a number inside.|Not a number inside.|anna|en")
    _write(directory, "bad_silent", np.zeros(16000, np.float32))
    lines.append("bad_silent|Nothing is said here.|Nothing is said here.|anna|en")
    _write(directory, "bad_short", voice[:1600])
    lines.append("bad_short|Too short.|Too short.|anna|en")
    _write(directory, "bad_long", np.tile(voice, 4)[:16000 * 9])
    lines.append("bad_long|Far too long.|Far too long.|anna|en")
    _write(directory, "bad_notext", voice)
    lines.append("bad_notext| | |anna|en")
    _write(directory, "bad_longtext", voice)
    lines.append("bad_longtext|" + "word " * 30 + "|" + "word " * 30 + "|anna|en")
    _write(directory, "bad_language", voice, ext="ogg")
    lines.append("bad_language|Bonjour à tous.|Bonjour à tous.|anna|fr")
    _write(directory, "ok_symbols", voice)
    lines.append("ok_symbols|Sing ♪ along ☃ now.|Sing ♪ along ☃ now.|ben|en")
    _write(directory, "ok_stereo", np.stack([voice, 0.5 * voice], axis=1), ext="flac")
    lines.append("ok_stereo|Two channels.|Two channels.|ben|en")
    import librosa  # pylint: disable=import-outside-toplevel
    _write(directory, "ok_44k", librosa.resample(voice, orig_sr=16000, target_sr=44100),
           rate=44100)
    lines.append("ok_44k|Another sample rate.|Another sample rate.|ben|en")
    lines.append("bad_columns|one|two|three|four|five|six")
    lines.append("onlyonecolumn")
    lines.append("café|Latin-1 bytes.|Latin-1 bytes.|ben|en".encode("latin-1"))
    lines.append(lines[0])  # duplicate id
    return write_metadata(directory, lines)


class BrokenDatasetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data")
        cls.work = os.path.join(cls.tmp, "run")
        os.makedirs(cls.data)
        cls.metadata = build_broken_dataset(cls.data)
        cls.config = tiny_config(val_fraction=0.0, max_text_length=100)
        cls.prepared = prepare_dataset(cls.config, cls.data, work_dir=cls.work)
        cls.report = cls.prepared.report
        cls.ids = {it.id for it in cls.prepared.items["train"]}
        cls.table = cls.report.table()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def assert_excluded(self, code, uid, where_part=None):
        self.assertEqual(self.report.count(code), 1, self.table)
        self.assertNotIn(uid, self.ids)
        problem = next(p for p in self.report.problems if p.code == code)
        self.assertIn(where_part or uid, problem.where)
        self.assertIn(code, self.table)
        self.assertIn(problem.where, self.table)  # first examples name the path

    def test_good_rows_are_kept(self):
        self.assertTrue({f"S{i:03d}" for i in range(1, GOOD + 1)} <= self.ids)
        self.assertEqual(self.ids - {f"S{i:03d}" for i in range(1, GOOD + 1)},
                         {"ok_symbols", "ok_stereo", "ok_44k"})

    def test_missing_file(self):
        self.assert_excluded("missing_file", "bad_missing", f"{self.metadata}:{GOOD + 1}")
        self.assertIn(os.path.join(self.data, "wavs", "bad_missing"), self.table)

    def test_unreadable_audio(self):
        self.assertEqual(self.report.count("unreadable_audio"), 2, self.table)
        self.assertNotIn("bad_garbage", self.ids)
        self.assertNotIn("bad_truncated", self.ids)
        details = {p.where.split(" ")[0]: p.detail for p in self.report.problems
                   if p.code == "unreadable_audio"}
        self.assertIn("truncated", details[os.path.join(self.data, "wavs", "bad_truncated.wav")])

    def test_empty_audio(self):
        self.assert_excluded("empty_audio", "bad_empty")

    def test_nonfinite_audio(self):
        self.assert_excluded("nonfinite_audio", "bad_nan")

    def test_silent_audio(self):
        self.assert_excluded("silent_audio", "bad_silent")

    def test_too_short(self):
        self.assert_excluded("too_short", "bad_short")

    def test_too_long(self):
        self.assert_excluded("too_long", "bad_long")

    def test_empty_text(self):
        self.assert_excluded("empty_text", "bad_notext")

    def test_text_too_long(self):
        self.assert_excluded("text_too_long", "bad_longtext")

    def test_unknown_language(self):
        self.assert_excluded("unknown_language", "bad_language")

    def test_wrong_column_count_names_the_line(self):
        self.assertEqual(self.report.count("wrong_columns"), 2, self.table)
        self.assertIn(f"{self.metadata}:{GOOD + 15}", self.table)
        self.assertNotIn("bad_columns", self.ids)
        self.assertNotIn("onlyonecolumn", self.ids)

    def test_non_utf8_line_number(self):
        problem = next(p for p in self.report.problems if p.code == "non_utf8")
        self.assertEqual(problem.where, f"{self.metadata}:{GOOD + 17}")
        self.assertEqual(self.report.count("non_utf8"), 1)

    def test_duplicate_id(self):
        self.assertEqual(self.report.count("duplicate_id"), 1, self.table)
        self.assertEqual(sum(1 for it in self.prepared.items["train"] if it.id == "S001"), 1)

    def test_unknown_characters_reported_and_removed(self):
        self.assertEqual(self.report.count("unknown_characters"), 1, self.table)
        item = next(it for it in self.prepared.items["train"] if it.id == "ok_symbols")
        self.assertEqual(item.text, "sing along now.")
        self.assertEqual(self.prepared.tokenizer.decode(item.tokens), "sing along now.")
        self.assertNotIn("♪", self.prepared.tokenizer.symbols)

    def test_stereo_downmixed_and_counted(self):
        self.assertEqual(self.report.count("stereo"), 1, self.table)
        self.assertIn("ok_stereo", self.ids)

    def test_other_sample_rate_resampled_and_counted(self):
        self.assertEqual(self.report.count("resampled"), 1, self.table)
        item = next(it for it in self.prepared.items["train"] if it.id == "ok_44k")
        self.assertAlmostEqual(item.num_samples / 16000, len(speech("S001")) / 16000, delta=0.01)

    def test_statistics_written_to_model_info(self):
        info = read_model_info(self.work)["dataset"]
        self.assertEqual(info["train"]["utterances"], len(self.ids))
        self.assertEqual(info["problems"]["missing_file"], {"train": 1})
        seconds = sum(it.num_samples for it in self.prepared.items["train"]) / 16000
        self.assertAlmostEqual(info["train"]["seconds"], seconds, places=1)
        self.assertRegex(info["train"]["duration"], r"^\d\d:\d\d:\d\d$")
        self.assertEqual(set(info["train"]["speakers"]), {"anna", "ben"})

    def test_second_run_uses_cached_audio_facts(self):
        cache = os.path.join(self.data, ".myxtts_cache", "validation_cache.json")
        with open(cache, encoding="utf-8") as f:
            entries = json.load(f)["paths"]
        self.assertIn(os.path.join(self.data, "wavs", "bad_nan.wav"), entries)
        before = os.stat(cache).st_mtime_ns
        os.remove(os.path.join(self.data, ".myxtts_cache", "validated.json"))  # validate again
        again = prepare_dataset(self.config, self.data)
        self.assertEqual(os.stat(cache).st_mtime_ns, before)  # nothing decoded, nothing saved
        self.assertEqual(again.report.counts(), self.report.counts())

    def test_a_process_pool_finds_what_threads_find(self):
        paths = sorted(os.path.join(self.data, "wavs", n)
                       for n in os.listdir(os.path.join(self.data, "wavs")))
        d = self.config.data
        threads = dict(validation._probe_all(paths, d, 2))  # pylint: disable=protected-access
        with mock.patch.object(validation, "PROCESS_MIN_FILES", 1), \
                mock.patch.object(validation, "PROBE_CHUNK", 3):
            processes = dict(validation._probe_all(paths, d, 2))  # pylint: disable=protected-access
        self.assertEqual(list(processes), paths)  # in order
        self.assertEqual(processes, threads)
        self.assertTrue(any(f.error for f in processes.values()))  # the broken files too

    def test_fail_policy_stops_with_the_table(self):
        config = tiny_config(val_fraction=0.0, max_text_length=100, validation_policy="fail")
        with self.assertRaises(DatasetValidationError) as ctx:
            prepare_dataset(config, self.data)
        message = str(ctx.exception)
        self.assertIn("validation_policy", message)
        self.assertIn("missing_file", message)
        self.assertIn("Dataset validation", message)

    def test_too_few_usable_rows_is_an_error_with_the_reason(self):
        config = tiny_config(val_fraction=0.0, max_text_length=100, min_train_items=100)
        with self.assertRaisesRegex(DatasetError, "min_train_items"):
            prepare_dataset(config, self.data)


class FolderAndFormatTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_missing_folder_names_the_path_not_a_flag(self):
        """The library is reached from train_main.py (--train-data, --val-data) and
        myxtts-evaluate (--data): each command adds its own flag (tests/test_cli_start.py)."""
        missing = os.path.join(self.tmp, "nowhere")
        with self.assertRaises(DatasetError) as ctx:
            prepare_dataset(tiny_config(), missing)
        self.assertIn(f"The dataset folder {missing} does not exist", str(ctx.exception))
        self.assertNotIn("--", str(ctx.exception))

    def test_empty_folder_names_the_path(self):
        with self.assertRaisesRegex(DatasetError, f"{self.tmp}.*is empty"):
            prepare_dataset(tiny_config(), self.tmp)

    def test_header_and_two_column_rows(self):
        lines = copy_sample_rows(self.tmp, 4)
        two_column = ["|".join(line.split("|")[:2]) for line in lines]
        write_metadata(self.tmp, ["id|text|normalized_text"] + two_column)
        prepared = prepare_dataset(tiny_config(val_fraction=0.0), self.tmp)
        self.assertEqual(len(prepared.items["train"]), 4)
        self.assertEqual(prepared.report.problems, [])
        self.assertEqual({it.speaker for it in prepared.items["train"]},
                         {os.path.basename(self.tmp)})

    def test_train_and_eval_metadata_files(self):
        lines = copy_sample_rows(self.tmp, 6)
        write_metadata(self.tmp, lines[:4], "metadata_train.csv")
        write_metadata(self.tmp, lines[4:], "metadata_eval.csv")
        prepared = prepare_dataset(tiny_config(), self.tmp)
        self.assertEqual([it.id for it in prepared.items["val"]], ["S005", "S006"])
        self.assertEqual(len(prepared.items["train"]), 4)

    def test_val_data_folder(self):
        train, val = os.path.join(self.tmp, "train"), os.path.join(self.tmp, "val")
        write_metadata(train, copy_sample_rows(train, 4))
        write_metadata(val, copy_sample_rows(val, 6)[4:])
        prepared = prepare_dataset(tiny_config(), train, val)
        self.assertEqual([it.id for it in prepared.items["val"]], ["S005", "S006"])
        self.assertIn("val", prepared.report.table())

    def test_speakers_without_a_second_utterance_are_counted_and_left_out(self):
        # Sample rows alternate speakers anna/ben: train S001 anna, S002 ben, S003 anna;
        # val S004 ben, S005 anna. ben's only training utterance has no other to serve as its
        # reference, and then the validation item of ben has none either.
        train, val = os.path.join(self.tmp, "train"), os.path.join(self.tmp, "val")
        write_metadata(train, copy_sample_rows(train, 3))
        write_metadata(val, copy_sample_rows(val, 5)[3:])
        prepared = prepare_dataset(tiny_config(), train, val)
        self.assertEqual([it.id for it in prepared.items["train"]], ["S001", "S003"])
        self.assertEqual([it.id for it in prepared.items["val"]], ["S005"])
        self.assertEqual(prepared.report.count("no_reference", "train"), 1)
        self.assertEqual(prepared.report.count("no_reference", "val"), 1)
        self.assertIn("has no second utterance", prepared.report.table())


class EvaluationDataErrorsTest(unittest.TestCase):
    """The evaluation library names the dataset folder and where it came from; myxtts-evaluate
    adds --data (arguments only: the errors come before a model is loaded)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.run_dir = os.path.join(self.tmp, "run")
        os.makedirs(self.run_dir)
        self.config = tiny_config()
        self.config.to_yaml(os.path.join(self.run_dir, "config.yaml"))
        self.gone = os.path.join(self.tmp, "gone")
        update_model_info(self.run_dir, dataset={
            "train_metadata": os.path.join(self.gone, "metadata.csv")})
        self.info = read_model_info(self.run_dir)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def evaluate(self, *argv):
        stderr = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(stderr):
            code = evaluate_command(["--checkpoint-dir", self.run_dir, *argv])
        self.assertEqual(code, 2, stderr.getvalue())
        return stderr.getvalue()

    def test_the_library_names_the_folder_and_the_command_adds_the_flag(self):
        with self.assertRaises(DatasetError) as recorded:
            find_sentences(self.config, self.run_dir, None, self.info)
        library = str(recorded.exception)
        self.assertIn(f"The dataset folder {self.gone} does not exist", library)
        self.assertIn(f"the run's training data, as {self.run_dir}/model_info.json", library)
        self.assertNotIn("--", library)
        self.assertIn(f"{library} Pass --data DIR", self.evaluate())

        other = os.path.join(self.tmp, "other")
        with self.assertRaises(DatasetError) as named:
            find_sentences(self.config, self.run_dir, other, self.info)
        library = str(named.exception)
        self.assertIn(f"The dataset folder {other} does not exist", library)
        self.assertNotIn("--", library)
        self.assertIn(f"{library} (--data {other})", self.evaluate("--data", other))


class SplitTest(unittest.TestCase):
    def rows(self, n):
        return [metadata.Row(f"u{i}", "text", "s", "en", f"/x/u{i}.wav", "/x/metadata.csv", i)
                for i in range(n)]

    def test_seeded_split_is_reproducible_saved_and_reused(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "split.json")
            train1, val1 = metadata.split_rows(self.rows(100), 0.1, 7, path)
            self.assertEqual(len(val1), 10)
            train2, val2 = metadata.split_rows(self.rows(100), 0.1, 7, None)
            self.assertEqual([r.id for r in val1], [r.id for r in val2])
            _, val_other_seed = metadata.split_rows(self.rows(100), 0.1, 8, None)
            self.assertNotEqual({r.id for r in val1}, {r.id for r in val_other_seed})
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
            self.assertEqual(set(saved["val_ids"]), {r.id for r in val1})
            self.assertEqual(len(saved["train_ids"]), 90)
            # more rows later: earlier assignments never move
            train3, val3 = metadata.split_rows(self.rows(150), 0.1, 7, path)
            self.assertTrue({r.id for r in val1} <= {r.id for r in val3})
            self.assertTrue({r.id for r in train1} <= {r.id for r in train3})
            self.assertEqual(len(train3) + len(val3), 150)


if __name__ == "__main__":
    unittest.main()
