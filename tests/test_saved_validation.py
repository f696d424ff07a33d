"""A validation's result is reused while nothing it depends on changed, and only then."""

import logging
import os
import shutil
import tempfile
import unittest

from myxtts.data.prepare import prepare_dataset
from myxtts.data.text import Tokenizer
from tests.data_samples import copy_sample_rows, tiny_config, write_metadata

REUSED = "still valid"


class SavedValidationTest(unittest.TestCase):
    def setUp(self):
        self.data = tempfile.mkdtemp()
        self.lines = copy_sample_rows(self.data, 12)
        write_metadata(self.data, self.lines)
        self.config = tiny_config()
        self.addCleanup(shutil.rmtree, self.data, True)

    def prepare(self, **kwargs):
        """(the prepared dataset, what myxtts.data logged)."""
        records = []
        handler = logging.Handler(logging.INFO)
        handler.emit = lambda record: records.append(record.getMessage())
        logger = logging.getLogger("myxtts.data")
        previous = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            prepared = prepare_dataset(self.config, self.data, **kwargs)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(previous)
        return prepared, "\n".join(records)

    def test_an_unchanged_dataset_is_not_validated_again_and_gives_the_same_result(self):
        first, log = self.prepare()
        self.assertNotIn(REUSED, log)
        second, log = self.prepare()
        self.assertIn(REUSED, log)
        self.assertEqual(second.items, first.items)
        self.assertEqual(second.tokenizer, first.tokenizer)
        self.assertEqual(second.report.table(), first.report.table())
        self.assertEqual(second.val_source, first.val_source)

    def test_a_changed_audio_file_metadata_or_setting_means_validating_again(self):
        self.prepare()
        wav = os.path.join(self.data, "wavs", sorted(os.listdir(os.path.join(self.data,
                                                                             "wavs")))[0])
        os.utime(wav, ns=(1, 10 ** 18))
        _, log = self.prepare()
        self.assertIn("1 audio file(s) changed", log)
        self.assertIn(REUSED, self.prepare()[1])
        write_metadata(self.data, self.lines[:-1])
        self.assertNotIn(REUSED, self.prepare()[1])
        self.config.data.max_audio_seconds = 5.0
        self.assertNotIn(REUSED, self.prepare()[1])

    def test_a_check_without_a_run_directory_reuses_a_runs_result_and_gets_its_split(self):
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        run, _ = self.prepare(work_dir=work)  # a training run: the split goes to the run
        check, log = self.prepare()  # --validate-only: the split goes to the cache folder
        self.assertIn(REUSED, log)
        self.assertEqual(check.items, run.items)
        with open(os.path.join(work, "data_split.json"), encoding="utf-8") as f:
            with open(os.path.join(self.data, ".myxtts_cache", "data_split.json"),
                      encoding="utf-8") as g:
                self.assertEqual(g.read(), f.read())
        self.assertIn(REUSED, self.prepare(work_dir=work)[1])

    def test_a_runs_own_vocabulary_must_be_the_results_tokenizer(self):
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        first, _ = self.prepare(work_dir=work)
        first.tokenizer.save(os.path.join(work, "vocab.json"))  # what the pipeline does
        self.assertIn(REUSED, self.prepare(work_dir=work)[1])
        Tokenizer(first.tokenizer.symbols[1:] + ["\u00e9"], first.tokenizer.cleaner).save(
            os.path.join(work, "vocab.json"))
        again, log = self.prepare(work_dir=work)
        self.assertNotIn(REUSED, log)
        self.assertEqual(again.tokenizer.symbols[-1], "\u00e9")


if __name__ == "__main__":
    unittest.main()
