"""Input pipeline: batch contract and static bucket shapes, seeded epochs, feature cache rebuilds,
the device feeder, and placement on the test run's two logical CPUs (data CPU:0 → model CPU:1)."""

import os
import shutil
import tempfile
import threading
import time
import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import DataConfig
from myxtts.data.buckets import BucketError, make_buckets, optimal_boundaries, padding_fraction
from myxtts.data.feeder import DeviceFeeder
from myxtts.data.pipeline import InputPipeline
from tests.data_samples import SAMPLE_DIR, copy_sample_rows, tiny_config, write_metadata

CONTRACT = {"tokens": tf.int32, "token_lengths": tf.int32, "language_ids": tf.int32,
            "mel": tf.float32, "mel_lengths": tf.int32, "ref_mel": tf.float32,
            "ref_lengths": tf.int32}


class BucketTest(unittest.TestCase):
    def test_static_shapes_multiples_of_r_and_even_memory(self):
        rng = np.random.default_rng(0)
        frames = rng.integers(40, 700, 500)
        buckets = make_buckets(frames, frames // 8, 4, [], 16, 3)
        self.assertLessEqual(len(buckets), 4)
        for b in buckets:
            self.assertEqual(b.frames % 3, 0)
            self.assertEqual(b.max_tokens % 8, 0)
            # padded frames per batch within one batch-row of the longest bucket's
            self.assertLessEqual(abs(b.frames * b.batch_size - 16 * buckets[-1].frames),
                                 b.frames)
        self.assertGreaterEqual(buckets[-1].frames, frames.max())

    def test_frame_budget_batches_respect_the_budget(self):
        frames = np.random.default_rng(2).integers(40, 700, 500)
        for replicas in (1, 2):
            buckets = make_buckets(frames, frames // 8, 4, [], 16, 3, replicas=replicas,
                                   max_frames_per_batch=3000)
            for b in buckets:
                self.assertLessEqual(b.frames * b.batch_size, 3000)
                self.assertGreater(b.frames * (b.batch_size + replicas), 3000)  # filled
                self.assertEqual(b.batch_size % replicas, 0)
        with self.assertRaisesRegex(BucketError, "max_frames_per_batch 600 holds no 1 "
                                                 "utterance.*at least 699"):
            make_buckets(frames, frames // 8, 4, [], 16, 3, max_frames_per_batch=600)

    def test_bucketing_cuts_padding(self):
        frames = np.random.default_rng(1).normal(500, 170, 5000).clip(90, 870).astype(int)
        single = padding_fraction(frames, [frames.max()])
        bucketed = padding_fraction(frames, optimal_boundaries(frames, DataConfig().num_buckets))
        self.assertLess(bucketed, 0.10)
        self.assertGreater(single, 3 * bucketed)


class SamplePipelineTest(unittest.TestCase):
    """The bundled sample (OGG/FLAC/WAV, two speakers, en/de/es) through the raw pipeline."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        cls.config = tiny_config(val_fraction=0.1)
        cls.pipeline = InputPipeline(cls.config, SAMPLE_DIR, work_dir=cls.work)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.work, ignore_errors=True)

    def featurized(self, epoch):
        return [self.pipeline.featurize(b) for b in self.pipeline.train_dataset(epoch)]

    def test_batches_follow_the_contract_and_bucket_shapes(self):
        p, r = self.pipeline, self.config.model.reduction_factor
        batches = self.featurized(0)
        self.assertEqual(len(batches), p.train_steps_per_epoch)
        shapes = {(b.frames, b.max_tokens, b.batch_size) for b in p.buckets}
        seen_tokens = set()
        for batch in batches:
            self.assertEqual(set(batch), set(CONTRACT))
            for key, dtype in CONTRACT.items():
                self.assertEqual(batch[key].dtype, dtype, key)
            size, frames, n_mels = batch["mel"].shape
            self.assertEqual(n_mels, self.config.data.n_mels)
            self.assertEqual(frames % r, 0)
            self.assertIn((frames, batch["tokens"].shape[1], size), shapes)
            mel_lengths = batch["mel_lengths"].numpy()
            self.assertTrue(np.all(mel_lengths <= frames))
            pad = np.log10(self.config.data.mel_floor)
            for row, n in enumerate(mel_lengths):
                self.assertTrue(np.all(batch["mel"][row, n:].numpy() == pad))
                self.assertGreater(float(batch["mel"][row, :n].numpy().max()), pad + 1)
            ref = batch["ref_lengths"].numpy()
            sr_frames = self.config.data.sample_rate / self.config.data.hop_length
            self.assertTrue(np.all(ref <= int(self.config.data.ref_max_seconds * sr_frames) + 1))
            tokens, lengths = batch["tokens"].numpy(), batch["token_lengths"].numpy()
            for row, n in enumerate(lengths):
                self.assertTrue(np.all(tokens[row, :n] > 0) and np.all(tokens[row, n:] == 0))
                seen_tokens.add(tuple(tokens[row, :n]))
        # every training utterance appears, and nothing else
        self.assertEqual(seen_tokens, {it.tokens for it in p.items["train"]})
        self.assertEqual(sorted(set(np.concatenate([b["language_ids"].numpy()
                                                    for b in batches]))), [0, 1, 2])

    def test_epochs_are_seeded(self):
        first = [b["tokens"].numpy() for b in self.featurized(3)]
        again = [b["tokens"].numpy() for b in self.featurized(3)]
        other = [b["tokens"].numpy() for b in self.featurized(4)]
        self.assertTrue(all(np.array_equal(a, b) for a, b in zip(first, again)))
        self.assertFalse(len(first) == len(other) and
                         all(np.array_equal(a, b) for a, b in zip(first, other)))

    def test_resuming_mid_epoch_gives_the_remaining_batches(self):
        # Raw mode leaves the skipped batches' utterances out before decoding anything.
        whole = list(self.pipeline.train_dataset(5))
        for skip in (2, len(whole) - 1):
            resumed = list(self.pipeline.train_dataset(5, skip_batches=skip))
            self.assertEqual(len(resumed), len(whole) - skip)
            for got, expected in zip(resumed, whole[skip:]):
                self.assertEqual(set(got), set(expected))
                for key in expected:
                    np.testing.assert_array_equal(got[key].numpy(), expected[key].numpy(), key)

    def test_vocab_and_split_saved_in_work_dir(self):
        self.assertTrue(os.path.isfile(os.path.join(self.work, "vocab.json")))
        self.assertTrue(os.path.isfile(os.path.join(self.work, "data_split.json")))
        again = InputPipeline(self.config, SAMPLE_DIR, work_dir=self.work)
        self.assertEqual(again.tokenizer, self.pipeline.tokenizer)
        self.assertEqual([it.id for it in again.items["val"]],
                         [it.id for it in self.pipeline.items["val"]])

    def test_feeder_delivers_every_batch_and_measures_waiting(self):
        with self.pipeline.train_batches(0, "/CPU:0") as feeder:
            self.assertGreater(feeder.wait_until_filled(30), 0.99)
            count = sum(1 for _ in feeder)
        self.assertEqual(count, self.pipeline.train_steps_per_epoch)
        self.assertEqual(feeder.batches, count)
        self.assertGreaterEqual(feeder.wait_seconds, 0.0)
        val = self.pipeline.val_batches("/CPU:0")
        self.assertEqual(sum(1 for _ in val), self.pipeline.val_steps)


class WorkerShardTest(unittest.TestCase):
    """Two workers of a multi-worker job, two replicas each: disjoint shards, the same number of
    batches per epoch (their all-reduces wait for each other), batch sizes that split evenly."""

    def test_shards_are_disjoint_equal_in_batches_and_split_evenly(self):
        work = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        pipelines = [InputPipeline(tiny_config(val_fraction=0.1), SAMPLE_DIR, work_dir=work,
                                   replicas=2, shard=(index, 2)) for index in range(2)]
        steps = {p.train_steps_per_epoch for p in pipelines}
        self.assertEqual(len(steps), 1)
        self.assertTrue(all(b.batch_size % 2 == 0 for b in pipelines[0].buckets))
        seen = []
        for index, pipeline in enumerate(pipelines):
            batches = list(pipeline.train_dataset(0))
            self.assertEqual(len(batches), pipeline.train_steps_per_epoch)
            self.assertEqual(len(list(pipeline.train_dataset(0, skip_batches=1))),
                             pipeline.train_steps_per_epoch - 1)
            tokens = {tuple(row[:n]) for b in batches for row, n in
                      zip(b["tokens"].numpy(), b["token_lengths"].numpy())}
            self.assertTrue(all(b["tokens"].shape[0] % 2 == 0 for b in batches))
            self.assertLessEqual(tokens, {it.tokens for it in
                                          pipeline.items["train"][index::2]})
            seen.append(tokens)
        self.assertFalse(seen[0] & seen[1])


class FeederTest(unittest.TestCase):
    def test_producer_errors_reach_the_consumer(self):
        def broken(batch):
            if batch["x"] >= 2:
                raise ValueError("feature failure in batch 2")
            return batch

        ds = tf.data.Dataset.range(5).map(lambda x: {"x": x})
        feeder = DeviceFeeder(ds, broken, "/CPU:0", "/CPU:0")
        got = [next(feeder)["x"].numpy(), next(feeder)["x"].numpy()]
        with self.assertRaisesRegex(ValueError, "batch 2"):
            next(feeder)
        self.assertEqual(got, [0, 1])
        feeder.close()

    def test_close_stops_a_producer_blocked_on_a_full_queue(self):
        ds = tf.data.Dataset.range(1000).map(lambda x: {"x": x})
        feeder = DeviceFeeder(ds, lambda b: b, "/CPU:0", "/CPU:0", capacity=2)
        self.assertEqual(feeder.wait_until_filled(10), 1.0)
        next(feeder)
        feeder.close()
        self.assertFalse(feeder._thread.is_alive())  # pylint: disable=protected-access
        with self.assertRaises(StopIteration):
            next(feeder)

    def test_exhausted_once_the_last_batch_is_featurized_while_batches_are_still_queued(self):
        ds = tf.data.Dataset.range(3).map(lambda x: {"x": x})
        with DeviceFeeder(ds, lambda b: b, "/CPU:0", "/CPU:0", capacity=3) as feeder:
            deadline = time.monotonic() + 30
            while not feeder.exhausted and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertTrue(feeder.exhausted)
            self.assertEqual([int(b["x"]) for b in feeder], [0, 1, 2])

    def test_a_counted_input_is_never_asked_for_its_end(self):
        """With count=N the producer stops after N batches: an input whose end never comes
        (here: one that would block, as tf.data inputs did for ~30 s at epoch ends) ends the
        epoch all the same, and the consumer gets every batch."""
        release = threading.Event()
        self.addCleanup(release.set)

        def elements():
            yield from ({"x": x} for x in range(3))
            release.wait(60)  # the end of this input takes a minute

        ds = tf.data.Dataset.from_generator(
            elements, output_signature={"x": tf.TensorSpec([], tf.int64)})
        started = time.monotonic()
        feeder = DeviceFeeder(ds, lambda b: b, "/CPU:0", "/CPU:0", count=3)
        self.assertEqual([int(b["x"]) for b in feeder], [0, 1, 2])
        self.assertTrue(feeder.exhausted)
        feeder.close()
        self.assertLess(time.monotonic() - started, 30)

    def test_consumer_wait_time_is_counted(self):
        def slow(batch):
            time.sleep(0.05)
            return batch

        ds = tf.data.Dataset.range(4).map(lambda x: {"x": x})
        with DeviceFeeder(ds, slow, "/CPU:0", "/CPU:0") as feeder:
            self.assertEqual(len(list(feeder)), 4)
        self.assertGreater(feeder.wait_seconds, 0.1)


@pytest.mark.slow
class CachedModeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        write_metadata(self.tmp, copy_sample_rows(self.tmp, 10))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cache_folders(self):
        return sorted(n for n in os.listdir(os.path.join(self.tmp, ".myxtts_cache"))
                      if n.startswith("features-train-"))

    def test_cache_built_reused_and_rebuilt_on_changes(self):
        config = tiny_config(feature_mode="cached", val_fraction=0.0)
        pipeline = InputPipeline(config, self.tmp)
        first = self.cache_folders()
        self.assertEqual(len(first), 1)
        cached = [pipeline.featurize(b) for b in pipeline.train_dataset(0)]
        self.assertEqual(len(cached), pipeline.train_steps_per_epoch)
        raw_pipeline = InputPipeline(tiny_config(val_fraction=0.0), self.tmp)
        raw = [raw_pipeline.featurize(b) for b in raw_pipeline.train_dataset(0)]
        by_tokens = lambda batches: {  # noqa: E731
            tuple(b["tokens"][i, :b["token_lengths"][i]].numpy()):
                b["mel"][i, :b["mel_lengths"][i]].numpy()
            for b in batches for i in range(b["tokens"].shape[0])}
        cached_mels, raw_mels = by_tokens(cached), by_tokens(raw)
        self.assertEqual(set(cached_mels), set(raw_mels))
        for key, mel in cached_mels.items():
            np.testing.assert_allclose(mel, raw_mels[key], atol=1e-4)

        stamp = os.stat(os.path.join(self.tmp, ".myxtts_cache", first[0], "index.json"))
        InputPipeline(config, self.tmp)  # unchanged: reused
        self.assertEqual(self.cache_folders(), first)
        self.assertEqual(stamp.st_mtime_ns, os.stat(os.path.join(
            self.tmp, ".myxtts_cache", first[0], "index.json")).st_mtime_ns)

        InputPipeline(tiny_config(feature_mode="cached", val_fraction=0.0, n_mels=32), self.tmp)
        second = self.cache_folders()
        self.assertEqual(len(second), 1)
        self.assertNotEqual(second, first)  # audio config changed → rebuilt, stale one removed

        wav = next(n for n in sorted(os.listdir(os.path.join(self.tmp, "wavs")))
                   if n.endswith(".wav"))
        os.utime(os.path.join(self.tmp, "wavs", wav), ns=(1, 10 ** 18))
        pipeline = InputPipeline(tiny_config(feature_mode="cached", val_fraction=0.0, n_mels=32),
                                 self.tmp)
        self.assertNotEqual(self.cache_folders(), second)  # file list changed → rebuilt
        self.assertEqual(sum(1 for _ in pipeline.train_dataset(1)),
                         pipeline.train_steps_per_epoch)


@pytest.mark.slow
class PlacementTest(unittest.TestCase):
    def test_batches_on_data_device_features_on_model_device(self):
        pipeline = InputPipeline(tiny_config(), SAMPLE_DIR, data_device=PLAN.data_device,
                                 work_dir=tempfile.mkdtemp())
        result = {"raw": [], "featurized": [], "model": []}
        for batch in pipeline.train_dataset(0).take(2):
            result["raw"] += [v.device for v in batch.values()]
            with tf.device(PLAN.data_device):
                result["featurized"] += [v.device for v in pipeline.featurize(batch).values()]
        with pipeline.train_batches(0, PLAN.model_device) as feeder:
            result["fill"] = feeder.wait_until_filled(30)
            for batch in feeder:
                result["model"] += [v.device for v in batch.values()]
        self.assertTrue(result["raw"] and result["model"])
        self.assertTrue(all(d.endswith("CPU:0") for d in result["raw"]), result["raw"])
        self.assertTrue(all(d.endswith("CPU:0") for d in result["featurized"]))
        self.assertTrue(all(d.endswith("CPU:1") for d in result["model"]), result["model"])
        self.assertEqual(result["fill"], 1.0)


if __name__ == "__main__":
    unittest.main()


def _contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    """True when `needle` (rows of haystack's row width) occurs in `haystack` exactly, at a row
    boundary."""
    row = haystack[0:1].nbytes
    data, part = np.ascontiguousarray(haystack).tobytes(), np.ascontiguousarray(needle).tobytes()
    at = data.find(part)
    while at >= 0:
        if at % row == 0:
            return True
        at = data.find(part, at + 1)
    return False


@pytest.mark.slow
class ReferenceIsNeverTheTargetTest(unittest.TestCase):
    """Every item's speaker reference is a slice of ANOTHER utterance of the same speaker, in
    both feature modes, for training and validation items alike."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        write_metadata(self.tmp, copy_sample_rows(self.tmp, 12))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, utterances, references):
        """utterances {tokens: (speaker, array)}; references [(tokens, reference array)]."""
        self.assertGreater(len(references), 8)
        for tokens, ref in references:
            speaker, own = utterances[tokens]
            sources = [key for key, (_, array) in utterances.items() if _contains(array, ref)]
            self.assertTrue(sources, "the reference is a slice of no utterance")
            self.assertNotIn(tokens, sources)
            self.assertEqual({utterances[key][0] for key in sources}, {speaker})

    def test_raw_mode(self):
        from myxtts.data.cache import load_samples
        pipeline = InputPipeline(tiny_config(val_fraction=0.25), self.tmp, work_dir=self.tmp)
        items = pipeline.items["train"] + pipeline.items["val"]
        utterances = {tuple(it.tokens): (it.speaker, load_samples(it, pipeline.data_config)
                                         [:, None]) for it in items}
        references = []
        for ds in (pipeline.train_dataset(0), pipeline.val_dataset()):
            for b in ds:
                for i in range(b["tokens"].shape[0]):
                    tokens = tuple(b["tokens"][i, :b["token_lengths"][i]].numpy())
                    ref = b["ref_audio"][i, :b["ref_audio_lengths"][i]].numpy()[:, None]
                    references.append((tokens, ref))
        self.check(utterances, references)

    def test_cached_mode(self):
        pipeline = InputPipeline(tiny_config(feature_mode="cached", val_fraction=0.25),
                                 self.tmp, work_dir=self.tmp)
        speakers = {tuple(it.tokens): it.speaker
                    for it in pipeline.items["train"] + pipeline.items["val"]}
        utterances, references = {}, []
        for ds in (pipeline.train_dataset(0), pipeline.val_dataset()):
            for b in ds:
                b = pipeline.featurize(b)
                for i in range(b["tokens"].shape[0]):
                    tokens = tuple(b["tokens"][i, :b["token_lengths"][i]].numpy())
                    utterances[tokens] = (speakers[tokens],
                                          b["mel"][i, :b["mel_lengths"][i]].numpy())
                    references.append((tokens, b["ref_mel"][i, :b["ref_lengths"][i]].numpy()))
        self.check(utterances, references)
