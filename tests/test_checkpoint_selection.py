"""best/ by a free-running measure (training.select_by text_match or wer): validation decodes
its sentences free-running and ranks checkpoints by how many read their own text, or by the
words the recogniser hears in them, not by the teacher-forced objective; early stopping follows
the same measure. With training.ema_momentum,
validation and best/ use the weights' moving average, and training goes on from its own."""

import json
import os
import shutil
import tempfile
import unittest

import tests.logical_devices  # noqa: F401  (before TensorFlow: two logical CPU devices)
from tests.logical_devices import PLAN
from tests.model_helpers import REPO, tiny_config
from tests.data_samples import copy_sample_rows, write_metadata
from tests.judges import WHISPER_MISSING
from tests.trainer_probes import batch, make_trainer, restored_global_state

import numpy as np

from myxtts.config import ConfigError
from myxtts.data.pipeline import InputPipeline
from myxtts.evaluation.recognizer import RecognizerUnavailableError
from myxtts.inference.checkpoint_loading import restore_model
from myxtts.run_directory import step_of as checkpoint_step
from myxtts.training.checkpoints import CheckpointError
from myxtts.training.optimization import weight_averages
from myxtts.training.trainer import XTTSTrainer
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

SAMPLE_DIR = os.path.join(REPO, "samples", "ljspeech_sample")


def _config(directory, select_by, sentences=3, patience=0, ema_momentum=0.0):
    config = tiny_config()
    config.training.ema_momentum = ema_momentum
    config.data.val_fraction = 0.1
    config.training.checkpoint_dir = directory
    config.training.select_by = select_by
    config.training.free_running_sentences = sentences
    config.training.early_stopping_patience = patience
    config.validate()
    return config


def _record(trainer, step, objective, **free_running):
    """One validation's figures at `step` (the objective and free_running/<name> values),
    ranked as the trainer ranks them; True when early stopping triggers."""
    trainer.step.step.assign(step)
    scalars = {"loss/objective": objective,
               **{f"free_running/{name}": value for name, value in free_running.items()}}
    score, measures = trainer._selection_score(scalars)
    trainer._record_validation(score, objective, measures)
    return trainer._after_validation(objective)


class SelectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        cls.pipeline = InputPipeline(_config(os.path.join(cls.work, "data"), "objective"),
                                     SAMPLE_DIR, work_dir=os.path.join(cls.work, "data"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def trainer(self, name, select_by, patience=0, ema_momentum=0.0):
        directory = os.path.join(self.work, name)
        return XTTSTrainer(_config(directory, select_by, patience=patience,
                                   ema_momentum=ema_momentum),
                           model_device=PLAN.model_device, tokenizer=self.pipeline.tokenizer)

    def record(self, trainer, step, text_match, mcd, objective):
        return _record(trainer, step, objective, text_match=text_match, mcd_own=mcd)

    def history(self, trainer):
        # step 10: reads half; step 20: lower objective but reads less; step 30: reads half,
        # nearer its recordings than step 10.
        self.record(trainer, 10, 0.5, 30.0, 1.0)
        self.record(trainer, 20, 0.25, 28.0, 0.8)
        return self.record(trainer, 30, 0.5, 29.0, 0.9)

    def test_text_match_picks_the_checkpoint_that_reads_best(self):
        trainer = self.trainer("by_text", "text_match")
        self.history(trainer)
        self.assertEqual(checkpoint_step(trainer.checkpoints.best), 30)
        with open(os.path.join(trainer.directory, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        self.assertEqual(info["best_step"], 30)
        self.assertEqual(info["best_measures"][0], ["text-match", 0.5])
        self.assertEqual(info["best_val_loss"], 0.9)  # the objective of the chosen checkpoint
        self.assertEqual(trainer._best_description(),
                         "text-match 0.5000, own DTW MCD dB 29.0000, validation loss 0.9000 "
                         "(step 30)")

    def test_objective_picks_the_lowest_loss(self):
        trainer = self.trainer("by_objective", "objective")
        self.history(trainer)
        self.assertEqual(checkpoint_step(trainer.checkpoints.best), 20)

    def test_early_stopping_follows_text_match(self):
        trainer = self.trainer("patience", "text_match", patience=2)
        self.assertFalse(self.record(trainer, 10, 0.5, 30.0, 1.0))
        self.assertFalse(self.record(trainer, 20, 0.25, 28.0, 0.8))  # objective better: no
        self.assertTrue(self.record(trainer, 30, 0.5, 31.0, 0.7))    # a tie, farther: stop

    def test_validation_measures_text_match_free_running(self):
        trainer = self.trainer("validate", "text_match")
        trainer.validate(self.pipeline)
        with open(os.path.join(trainer.directory, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        names = [name for name, _ in info["best_measures"]]
        self.assertEqual(names, ["text-match", "own DTW MCD dB", "validation loss"])
        match, distance = info["best_measures"][0][1], info["best_measures"][1][1]
        self.assertIn(match * 3, (0.0, 1.0, 2.0, 3.0))  # a share of the 3 sentences
        self.assertGreater(distance, 0.0)
        self.assertEqual(checkpoint_step(trainer.checkpoints.best), 0)

    def test_free_running_sentences_are_each_validation_row_once(self):
        # The pipeline completes a bucket's last batch by repeating its rows; a repeated
        # sentence would be matched against itself.
        trainer = self.trainer("distinct", "text_match")
        seen, rows = [], 0
        with self.pipeline.val_batches(PLAN.model_device) as feeder:
            for batch in feeder:
                rows += int(batch["tokens"].shape[0])
                generated = trainer._free_running(batch, 100)
                tokens = batch["tokens"].numpy()[:len(generated["lengths"])]
                seen += [tuple(row) for row in tokens]
        self.assertGreater(rows, len(seen))  # the batches did repeat rows
        self.assertEqual(len(seen), len(self.pipeline.items["val"]))
        self.assertEqual(len(set(seen)), len(seen))

    def test_validation_and_best_use_the_moving_average(self):
        trainer = self.trainer("averaged", "text_match", ema_momentum=0.99)
        pairs = weight_averages(trainer.optimizer)
        self.assertEqual(len(pairs), len(trainer.model.trainable_variables))
        for variable, average in pairs:  # an average unlike the trained weights
            average.assign(variable + 0.25)
        trained = [variable.numpy() for variable, _ in pairs]
        averages = [average.numpy() for _, average in pairs]
        trainer.validate(self.pipeline)
        # Training goes on from its own weights; the average is untouched.
        for (variable, average), value, mean in zip(pairs, trained, averages):
            np.testing.assert_array_equal(variable.numpy(), value)
            np.testing.assert_array_equal(average.numpy(), mean)
        # best/ holds the average as the model's weights: what --checkpoint best loads.
        best = restore_model(trainer.directory, trainer.checkpoints.best, trainer.config,
                             self.pipeline.tokenizer)
        saved = {v.path: v.numpy() for v in best.trainable_variables}
        for (variable, _), mean in zip(pairs, averages):
            np.testing.assert_array_equal(saved[variable.path], mean)

    def test_text_match_needs_two_sentences(self):
        with self.assertRaisesRegex(ConfigError, "free_running_sentences"):
            _config(os.path.join(self.work, "one"), "text_match", sentences=1)


@unittest.skipIf(WHISPER_MISSING, WHISPER_MISSING)
class WerSelectionTest(unittest.TestCase):
    """training.select_by wer on English sentences (the recogniser's tiny.en hears English)."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        data = os.path.join(cls.work, "english")
        write_metadata(data, copy_sample_rows(data, 40))
        config = cls.config(os.path.join(cls.work, "data"))
        cls.pipeline = InputPipeline(config, data, work_dir=os.path.join(cls.work, "data"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    @staticmethod
    def config(directory, patience=0):
        config = _config(directory, "objective", patience=patience)
        config.data.languages = ["en"]
        config.training.select_by = "wer"
        config.validate()
        return config

    def trainer(self, name, patience=0):
        return XTTSTrainer(self.config(os.path.join(self.work, name), patience),
                           model_device=PLAN.model_device, tokenizer=self.pipeline.tokenizer)

    def record(self, trainer, step, wer, cer, objective):
        return _record(trainer, step, objective, wer=wer, cer=cer)

    def test_wer_picks_the_checkpoint_heard_best_and_drives_early_stopping(self):
        trainer = self.trainer("by_wer", patience=2)
        self.assertFalse(self.record(trainer, 10, 0.6, 0.40, 1.0))
        self.assertFalse(self.record(trainer, 20, 0.7, 0.30, 0.8))  # lower objective: no
        self.assertFalse(self.record(trainer, 30, 0.6, 0.35, 0.9))  # a tie, fewer char errors
        self.assertEqual(checkpoint_step(trainer.checkpoints.best), 30)
        self.assertEqual(trainer._best_description(),
                         "WER 0.6000, CER 0.3500, validation loss 0.9000 (step 30)")
        self.assertFalse(self.record(trainer, 40, 0.65, 0.3, 0.7))
        self.assertTrue(self.record(trainer, 50, 0.6, 0.36, 0.7))   # two without a better one

    def test_the_recogniser_hears_the_validation_texts_in_their_recordings(self):
        # The recorded mels through Griffin-Lim, as validation hears its free-running outputs:
        # the texts read back from the tokens are what the recordings say.
        trainer = self.trainer("heard")
        counts = []
        with self.pipeline.val_batches(PLAN.model_device) as feeder:
            for batch in feeder:
                counts += trainer._heard_errors(batch, batch["mel"].numpy(),
                                                batch["mel_lengths"].numpy())
        errors, words = sum(c[0] for c in counts), sum(c[1] for c in counts)
        self.assertGreaterEqual(len(counts), len(self.pipeline.items["val"]))
        self.assertLessEqual(errors / words, 0.5)

    def test_validation_measures_the_free_running_wer(self):
        trainer = self.trainer("validate")
        trainer.validate(self.pipeline)
        with open(os.path.join(trainer.directory, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        names = [name for name, _ in info["best_measures"]]
        self.assertEqual(names, ["WER", "CER", "validation loss"])
        wer, cer = info["best_measures"][0][1], info["best_measures"][1][1]
        self.assertGreaterEqual(wer, 0.8)  # an untrained model says none of the words
        self.assertGreater(cer, 0.0)
        self.assertEqual(checkpoint_step(trainer.checkpoints.best), 0)

    def test_phonemes_and_languages_whisper_does_not_hear_are_refused(self):
        config = self.config(os.path.join(self.work, "phonemes"))
        config.data.use_phonemes = True
        with self.assertRaisesRegex(ConfigError, "wer needs character tokens"):
            config.validate()
        config = self.config(os.path.join(self.work, "german"))
        config.data.languages = ["en", "de"]
        with self.assertRaisesRegex(RecognizerUnavailableError, "English-only"):
            XTTSTrainer(config, model_device=PLAN.model_device, tokenizer=self.pipeline.tokenizer)


class MovingAverageTest(unittest.TestCase):
    def test_each_update_moves_the_average_by_its_momentum(self):
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        with restored_global_state():
            trainer = make_trainer(os.path.join(work, "run"), xla=False, ema_momentum=0.75)
            pairs = weight_averages(trainer.optimizer)
            trainer.step(batch(seed=1))  # the first update copies the weights
            for variable, average in pairs:
                np.testing.assert_allclose(average.numpy(), variable.numpy(), atol=1e-7)
                average.assign(variable + 1.0)
            before = [average.numpy() for _, average in pairs]
            trainer.step(batch(seed=2))
            for (variable, average), old in zip(pairs, before):
                np.testing.assert_allclose(average.numpy(),
                                           0.75 * old + 0.25 * variable.numpy(), atol=1e-6)
            # A resumed run has the same average.
            trainer._save()
            again = make_trainer(os.path.join(work, "run"), xla=False, ema_momentum=0.75)
            for (_, average), (_, restored) in zip(pairs, weight_averages(again.optimizer)):
                np.testing.assert_array_equal(average.numpy(), restored.numpy())

    def test_turning_it_on_for_a_run_saved_without_it_is_a_clear_error(self):
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        with restored_global_state():
            trainer = make_trainer(os.path.join(work, "run"), xla=False)
            trainer.step(batch(seed=1))
            saved = trainer._save()
            with self.assertRaisesRegex(CheckpointError, "training.ema_momentum"):
                make_trainer(os.path.join(work, "run"), xla=False, ema_momentum=0.9)
            self.assertEqual(make_trainer(os.path.join(work, "run"), xla=False).global_step, 1)
            self.assertTrue(os.path.exists(saved + ".index"))

    def test_off_by_default(self):
        self.assertEqual(tiny_config().training.ema_momentum, 0.0)
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, True)
        with self.assertRaisesRegex(ConfigError, "ema_momentum"):
            _config(work, "objective", ema_momentum=1.0)


if __name__ == "__main__":
    unittest.main()
