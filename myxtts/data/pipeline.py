"""The input pipeline: validated items → bucketed batches on the data device → features on the
model device.

Public API (what the trainer calls; docs/data.md has the same with examples):

    pipeline = InputPipeline(config, train_dir, val_dir=None, *, data_device="/CPU:0",
                             work_dir=None, base_vocabulary=None, replicas=1, shard=None)
        Validates the dataset(s) (raises DatasetError / DatasetValidationError, message includes
        the summary table), logs the table, saves work_dir/vocab.json (or reuses it; a new one
        extends `base_vocabulary`, a warm start's source vocab.json, when given) and writes
        the dataset statistics to work_dir/model_info.json. In cached mode it also builds or
        reuses the feature cache.
    pipeline.tokenizer            Tokenizer (vocab_size, encode, decode, save, load)
    pipeline.languages            list of language codes; language id = index
    pipeline.report               ValidationReport (table(), to_dict(), count(code))
    pipeline.items                {"train": [Item], "val": [Item]}
    pipeline.buckets              [Bucket(frames, max_tokens, batch_size)]: the static shapes
    pipeline.train_steps_per_epoch  batches per training epoch (exact)
    pipeline.val_steps            batches in one validation pass (0 when there is no val set)
    pipeline.train_batches(epoch, model_device, *, skip_batches=0, capacity=2) -> DeviceFeeder
    pipeline.val_batches(model_device, *, capacity=2) -> DeviceFeeder | None
        Iterators of featurized batch dicts on `model_device` (docs/architecture.md "The
        batch"), or split over a strategy's replicas when `model_device` is a
        myxtts.training.distribution.Distribution, featurized on the data device in a
        background thread (see feeder.py):
        `feeder.wait_until_filled(seconds)`, `feeder.fill_fraction`, `feeder.wait_seconds`,
        `feeder.batches`, `feeder.close()`; usable as a context manager.
    pipeline.train_dataset(epoch, *, skip_batches=0) / pipeline.val_dataset() -> tf.data.Dataset
        The un-featurized batches, already on the data device (prefetch_to_device is the last
        stage); pipeline.featurize(batch) turns one into the batch dict (call it under
        tf.device(data_device)). The feeders are built from exactly these two.

Modes (data.feature_mode):
  raw     host: decode, resample, crop, reference slice, tokenize (tf.numpy_function, parallel
          map), bucket and pad → prefetch_to_device(data_device); data device: log-mels of the
          audio and of the reference in a tf.function.
  cached  log-mels read from sharded TFRecords (cache.py) → shuffle buffer → bucket and pad →
          prefetch_to_device(data_device); the reference is a random slice of the mel of
          another utterance of the same speaker (a bank read once from the cache; raw mode
          decodes another utterance of the same speaker). Never the target itself.

Batching: each epoch's order is a permutation seeded by (data.seed, epoch); utterances are
grouped by bucket (group_by_window) and padded to the bucket's static shape; a bucket's last,
partial batch is completed with utterances of the same batch so every batch of a bucket has
the same shape (one XLA compile per bucket).

Several model replicas (`replicas`, a tf.distribute strategy's replicas on this machine): every
bucket's batch size is a multiple of `replicas`, so each replica's slice has the same padded
shape. Several workers (`shard=(index, count)`, MultiWorkerMirroredStrategy): worker `index`
trains on the utterances whose position in the training list is index modulo count, and every
worker cuts its epochs to the number of batches of the smallest shard (each worker counts them
all from the metadata), so all workers step through the same number of batches per epoch, as
their collective all-reduces require. Validation is not sharded: every worker validates the same
batches with the same weights and takes the same decisions.
"""

from __future__ import annotations

import collections
import logging
import math
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from myxtts.data import audio as audio_lib

from myxtts.data import audio_io, audio_math
from myxtts.data import cache as cache_lib
from myxtts.data import service as service_lib
from myxtts.data import voice_shifts
from myxtts.data.buckets import Bucket, bucket_index, make_buckets
from myxtts.data.feeder import DeviceFeeder
from myxtts.data.prepare import VOCAB_FILE, prepare_dataset
from myxtts.data.validation import ReferencePools

logger = logging.getLogger("myxtts.data")

AUTOTUNE = tf.data.AUTOTUNE


class InputPipeline:
    """Validated dataset → bucketed batches on the data device → features on the model device."""

    def __init__(self, config, train_dir: str, val_dir: Optional[str] = None, *,
                 data_device: str = "/CPU:0", work_dir: Optional[str] = None,
                 base_vocabulary: Optional[str] = None, replicas: int = 1,
                 shard: Optional[Tuple[int, int]] = None):
        self.config = config
        self.shard = shard
        d = self.data_config = config.data
        self.data_service = d.data_service or None
        if self.data_service:
            self._check_service(shard)
            # a new token per pipeline: a restarted client never joins an old job
            run = os.path.basename(os.path.abspath(work_dir or train_dir))
            self._service_run = f"{run}-{service_lib.run_token()}"
            self.service_stall_seconds = service_lib.STALL_SECONDS
        self.data_device = data_device
        prepared = prepare_dataset(config, train_dir, val_dir, work_dir, base_vocabulary)
        self.report = prepared.report
        self.tokenizer = prepared.tokenizer
        self.items = prepared.items
        if d.voice_shifts:
            shifted = voice_shifts.shifted_items(self.items["train"], d.voice_shifts, d)
            logger.info("Voice shifts %s: %d shifted copies of the %d training utterances, as "
                        "%d more speakers.", ", ".join(f"{f:g}" for f in d.voice_shifts),
                        len(shifted), len(self.items["train"]),
                        len({it.speaker for it in shifted}))
            self.items = {**self.items, "train": self.items["train"] + shifted}
        self.languages = list(d.languages)
        logger.info("%s\n  validation rows: %s", self.report.table(), prepared.val_source)
        if work_dir:
            self.tokenizer.save(f"{work_dir}/{VOCAB_FILE}")

        r = config.model.reduction_factor
        everything = self.items["train"] + self.items["val"]
        frames = [audio_math.num_frames(it.num_samples, d.hop_length) for it in everything]
        self.buckets: List[Bucket] = make_buckets(
            frames, [max(1, len(it.tokens)) for it in everything], d.num_buckets,
            d.bucket_boundaries, d.batch_size, r, replicas=replicas,
            max_frames_per_batch=d.max_frames_per_batch)
        self.ref_frames = audio_math.num_frames(int(d.ref_max_seconds * d.sample_rate),
                                               d.hop_length)
        self.train_steps_per_epoch = self._count_batches(self.items["train"])
        if shard:
            self.train_steps_per_epoch = min(
                self._count_batches(self.items["train"][i::shard[1]]) for i in range(shard[1]))
            logger.info("Worker %d of %d trains on every %d-th utterance from the %d-th: %d "
                        "batches per epoch (the smallest shard's count).", shard[0] + 1,
                        shard[1], shard[1], shard[0] + 1, self.train_steps_per_epoch)
        self.val_steps = self._count_batches(self.items["val"])
        logger.info("Buckets (mel frames / tokens / batch size): %s; %d training batches per "
                    "epoch, %d validation batches.",
                    ", ".join(f"{b.frames}/{b.max_tokens}/{b.batch_size}" for b in self.buckets),
                    self.train_steps_per_epoch, self.val_steps)

        # Each item's speaker reference is another utterance of its speaker (validation made
        # sure there is one): never the target itself, in either feature mode.
        self.reference_pools = ReferencePools(self.items)
        # XLA fuses framing, the float64 window/FFT and the mel projection; batches have one
        # static shape per bucket, so it compiles once per bucket.
        self._log_mel = audio_lib.LogMel.for_device(
            d, tf.DeviceSpec.from_string(data_device).device_type or "CPU")
        # Not XLA-compiled as a whole: the mel and reference-mel launches run concurrently.
        self._featurize = tf.function(self._featurize_batch, reduce_retracing=True)
        self.feature_mode = d.feature_mode
        self._shards: Dict[str, List[str]] = {}
        self._bank = None
        if self.feature_mode == "cached":
            for split in ("train", "val"):
                if self.items[split]:
                    # absolute: tf.data service workers may run in another directory
                    self._shards[split] = [os.path.abspath(path) for path in
                                           cache_lib.ensure_cache(self.items[split], split, d,
                                                                  prepared.cache_dir,
                                                                  data_device)]
        self._cache_dir = prepared.cache_dir

    # ---- public ------------------------------------------------------------------------------
    def train_dataset(self, epoch: int, *, skip_batches: int = 0) -> tf.data.Dataset:
        """Epoch `epoch`'s batches (seeded order), on the data device, not yet featurized."""
        return self._dataset("train", epoch, training=True, skip_batches=skip_batches)

    def _in_shard(self, index):
        """Whether training item `index` belongs to this worker (True without shards)."""
        return self.shard is None or index % self.shard[1] == self.shard[0]

    def val_dataset(self) -> Optional[tf.data.Dataset]:
        """The validation batches in a fixed order (None without validation rows)."""
        if not self.items["val"]:
            return None
        return self._dataset("val", 0, training=False, skip_batches=0)

    def featurize(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """Batch dict of docs/architecture.md from a dataset element (a tf.function)."""
        return self._featurize(batch)

    def train_batches(self, epoch: int, model_device: str, *, skip_batches: int = 0,
                      capacity: int = 2) -> DeviceFeeder:
        stall = {}
        if self.data_service:
            stall = dict(stall_seconds=self.service_stall_seconds, stall_message=(
                f"The tf.data service at {self.data_service} stopped delivering epoch "
                f"{epoch + 1}'s batches: a worker probably died mid-epoch (TensorFlow then waits "
                f"for it indefinitely). Training stops here without a new checkpoint; run the "
                f"same command again, with the workers running, to resume from the last "
                f"checkpoint (the epoch is read again from its start)."))
        # a tf.data service epoch has no exact count (docs/data.md, "tf.data service")
        count = None if self.data_service else self.train_steps_per_epoch - skip_batches
        return DeviceFeeder(self.train_dataset(epoch, skip_batches=skip_batches),
                            self.featurize, self.data_device, model_device, capacity,
                            name=f"train-epoch{epoch}", count=count, **stall)

    def val_batches(self, model_device: str, *, capacity: int = 2) -> Optional[DeviceFeeder]:
        dataset = self.val_dataset()
        if dataset is None:
            return None
        return DeviceFeeder(dataset, self.featurize, self.data_device, model_device, capacity,
                            name="val", count=self.val_steps)

    # ---- batching ------------------------------------------------------------------------------
    def _count_batches(self, items) -> int:
        counts = collections.Counter(bucket_index(self.buckets, audio_math.num_frames(
            it.num_samples, self.data_config.hop_length)) for it in items)
        return sum(math.ceil(n / self.buckets[b].batch_size) for b, n in counts.items())

    def _bucketed(self, ds: tf.data.Dataset, frames_key: str, padding: Dict[str, float],
                  sample_keys: Dict[str, int]) -> tf.data.Dataset:
        """Groups elements by bucket and pads each group to the bucket's static shape.

        `sample_keys` maps a per-step key to its samples per frame (hop for audio, 1 for mel).
        The ragged keys are padded to the bucket's length, `tokens` to its max_tokens.
        """
        frames = tf.constant([b.frames for b in self.buckets], tf.int64)
        sizes = tf.constant([b.batch_size for b in self.buckets], tf.int64)
        max_tokens = tf.constant([b.max_tokens for b in self.buckets], tf.int64)

        def steps(index, per_frame):
            # F frames hold at most F * hop - 1 audio samples (centred STFT), or F mel frames
            bucket_frames = tf.gather(frames, index)
            return bucket_frames * per_frame - 1 if per_frame > 1 else bucket_frames

        def with_bucket(element):
            n = tf.cast(element[frames_key], tf.int64)
            index = tf.minimum(tf.reduce_sum(tf.cast(frames < n, tf.int64)),
                               len(self.buckets) - 1)
            element = dict(element, bucket=index)
            for key, per_frame in sample_keys.items():
                element[key] = element[key][:steps(index, per_frame)]
            return element

        def padded_shapes(index, element_spec):
            shapes = {key: spec.shape for key, spec in element_spec.items()}
            for key, per_frame in sample_keys.items():
                inner = tf.constant(element_spec[key].shape[1:].as_list(), tf.int64)
                shapes[key] = tf.concat([[steps(index, per_frame)], inner], 0)
            shapes["tokens"] = tf.reshape(tf.gather(max_tokens, index), [1])
            return shapes

        def reduce(index, window):
            spec = window.element_spec
            return window.padded_batch(
                tf.gather(sizes, index), padded_shapes=padded_shapes(index, spec),
                padding_values={k: tf.constant(padding.get(k, 0), spec[k].dtype)
                                for k in spec})

        def fill(batch):
            # the last batch of a bucket is completed with its own utterances: same shape
            size = tf.gather(sizes, batch["bucket"][0])
            take = tf.range(size, dtype=tf.int32) % tf.shape(batch["bucket"])[0]
            return {k: tf.gather(v, take) for k, v in batch.items()}

        ds = ds.map(with_bucket, num_parallel_calls=self._parallel, deterministic=True)
        ds = ds.group_by_window(lambda e: e["bucket"], reduce,
                                window_size_func=lambda index: tf.gather(sizes, index))
        return ds.map(fill, num_parallel_calls=self._parallel, deterministic=True)

    @property
    def _parallel(self):
        return self.data_config.num_workers or AUTOTUNE

    def _dataset(self, split: str, epoch: int, training: bool,
                 skip_batches: int) -> tf.data.Dataset:
        d = self.data_config
        if training and self.data_service:
            ds = self._service_elements(epoch, skip_batches)
        elif self.feature_mode == "cached":
            ds = self._cached_elements(split, epoch, training)
            if skip_batches:
                ds = ds.skip(skip_batches)
        else:
            ds = self._raw_elements(split, epoch, training, skip_batches)
        if training and self.shard:
            ds = ds.take(self.train_steps_per_epoch - skip_batches)
        options = tf.data.Options()
        options.deterministic = True
        ds = ds.with_options(options)
        # prefetch_to_device must be the last transformation (TensorFlow requires it).
        return ds.apply(tf.data.experimental.prefetch_to_device(self.data_device,
                                                                buffer_size=d.buffer_size))

    # ---- tf.data service: the training batches made by the service's workers -------------------
    def _check_service(self, shard) -> None:
        service_lib.parse_address(self.data_service)
        if self.data_config.feature_mode != "cached":
            raise service_lib.DataServiceError(
                f"data.data_service {self.data_config.data_service} needs data.feature_mode: "
                f"cached (raw mode decodes audio in Python, which tf.data service workers "
                f"cannot run). Set data.feature_mode: cached in the config.")
        if shard:
            raise service_lib.DataServiceError(
                "data.data_service cannot be combined with several training workers "
                "(MultiWorkerMirroredStrategy): their epochs must have equal batch counts, "
                "which the service does not promise. Use one or the other.")

    def _service_elements(self, epoch: int, skip_batches: int) -> tf.data.Dataset:
        """Epoch `epoch`'s bucketed, padded batches, made by the service's workers (each reads
        the cache shards the dispatcher hands it: each utterance once per epoch while the
        workers live). `skip_batches` cannot be honoured: the resumed epoch is read again from
        its start (docs/data.md, "tf.data service")."""
        name = service_lib.job_name(self._service_run, epoch + 1)
        if skip_batches:
            logger.warning(
                "tf.data service: epoch %d is resumed at batch %d, but batches made by service "
                "workers cannot be skipped exactly, so the WHOLE EPOCH IS READ AGAIN FROM ITS "
                "START (at least once: the utterances of its first %d batches are trained on "
                "again; the epoch ends when the service has produced every utterance).",
                epoch + 1, skip_batches, skip_batches)
        logger.info("tf.data service: epoch %d's training batches come from the workers of "
                    "the dispatcher at %s (job %s, each shard of the feature cache to one "
                    "worker).", epoch + 1, self.data_service, name)
        ds = self._cached_elements("train", epoch, True)
        return service_lib.distribute(ds, self.data_service, name)

    # ---- raw mode: audio batches, mels on the data device ---------------------------------------
    def _raw_elements(self, split: str, epoch: int, training: bool,
                      skip_batches: int) -> tf.data.Dataset:
        d = self.data_config
        items = self.items[split]
        pools = self.reference_pools
        ref_samples = audio_math.samples_for_frames(self.ref_frames, d.hop_length)

        def load(index):
            i = int(index)
            item = items[i]
            samples = cache_lib.load_samples(item, d)
            rng = np.random.default_rng([d.seed, epoch, i])
            pool = pools.pool(split, i)
            ref = cache_lib.load_samples(pool[int(rng.integers(len(pool)))], d)
            start, length = audio_io.reference_slice(len(ref), d.sample_rate, d.ref_min_seconds,
                                                      d.ref_max_seconds, rng)
            ref = ref[start:start + min(length, ref_samples)]
            return (samples, np.int32(len(samples)), ref, np.int32(len(ref)),
                    np.asarray(item.tokens, np.int32), np.int32(len(item.tokens)),
                    np.int32(item.language_id))

        keys = ("audio", "audio_lengths", "ref_audio", "ref_audio_lengths", "tokens",
                "token_lengths", "language_ids")
        types = (tf.float32, tf.int32, tf.float32, tf.int32, tf.int32, tf.int32, tf.int32)

        def load_element(index):
            values = tf.numpy_function(load, [index], types, stateful=False)
            element = dict(zip(keys, values))
            for key in ("audio", "ref_audio", "tokens"):
                element[key].set_shape([None])
            for key in ("audio_lengths", "ref_audio_lengths", "token_lengths", "language_ids"):
                element[key].set_shape([])
            element["frames"] = 1 + element["audio_lengths"] // d.hop_length
            return element

        order = (np.random.default_rng([d.seed, epoch]).permutation(len(items)) if training
                 else np.arange(len(items)))
        if training and self.shard:
            order = order[self._in_shard(order)]
        if skip_batches:
            order = self._without_first_batches(items, order, skip_batches)
        ds = tf.data.Dataset.from_tensor_slices(order.astype(np.int64))
        ds = ds.map(load_element, num_parallel_calls=self._parallel, deterministic=True)

        def pad_ref(element):
            element = dict(element)
            element["ref_audio"] = tf.pad(element["ref_audio"],
                                          [[0, ref_samples - tf.shape(element["ref_audio"])[0]]])
            element["ref_audio"].set_shape([ref_samples])
            return element

        ds = ds.map(pad_ref, num_parallel_calls=self._parallel, deterministic=True)
        ds = self._bucketed(ds, "frames", {}, {"audio": d.hop_length})
        return ds.map(lambda b: {k: v for k, v in b.items() if k != "frames"})

    def _without_first_batches(self, items, order: np.ndarray, count: int) -> np.ndarray:
        """`order` without the utterances of the first `count` batches it gives, found without
        decoding any audio: the same bucketing runs over the lengths in the metadata. Each
        bucket's batches are consecutive runs of its utterances in `order`, so the batches of
        what is left are exactly the later batches of the whole order (resuming mid-epoch)."""
        frames = np.array([audio_math.num_frames(it.num_samples, self.data_config.hop_length)
                           for it in items], np.int64)
        ds = tf.data.Dataset.from_tensor_slices({"index": order.astype(np.int64),
                                                 "frames": frames[order]})
        ds = ds.map(lambda e: dict(e, tokens=tf.zeros([1], tf.int32)))
        skipped = [batch["index"].numpy() for batch in
                   self._bucketed(ds, "frames", {}, {}).take(count)]
        if not skipped:
            return order
        return order[~np.isin(order, np.concatenate(skipped))]

    # ---- cached mode: mels from TFRecords -------------------------------------------------------
    def _cached_elements(self, split: str, epoch: int, training: bool) -> tf.data.Dataset:
        """Pure TensorFlow ops (no Python callbacks, no lookup tables), so the dataset can also
        run on tf.data service workers."""
        d = self.data_config
        items = self.items[split]
        shards = list(self._shards[split])
        if training:
            shards = [shards[i] for i in
                      np.random.default_rng([d.seed, epoch]).permutation(len(shards))]
        lengths = np.fromiter((len(it.tokens) for it in items), np.int64, len(items))
        tokens = tf.RaggedTensor.from_row_lengths(
            np.fromiter((t for it in items for t in it.tokens), np.int32, int(lengths.sum())),
            lengths)
        languages = tf.constant(np.fromiter((it.language_id for it in items), np.int32,
                                            len(items)))
        log_floor = math.log10(d.mel_floor)
        frames_per_second = d.sample_rate / d.hop_length
        ref_min = max(1, int(d.ref_min_seconds * frames_per_second))
        ref_max = self.ref_frames
        bank = self._reference_bank(split)

        def parse(serialized):
            index, mel = cache_lib.parse_record(serialized, d.n_mels)
            return {"index": index, "mel": mel}

        def to_element(record):
            index = record["index"]
            mel = record["mel"]
            seed = tf.stack([tf.cast(d.seed * 100003 + epoch, tf.int64), index])
            # one of the bank rows of the item's speaker (its training rows, for a training
            # item), never the item's own row
            speaker = tf.gather(bank["speaker"], index)
            first = tf.gather(bank["first"], speaker)
            count = tf.gather(bank["count"], speaker)
            own = tf.gather(bank["own"], index)
            own_in = tf.cast((own >= 0) & (own < count), tf.int32)
            pick = tf.random.stateless_uniform([], seed + 2, 0, count - own_in, tf.int32)
            pick = pick + tf.cast((own_in > 0) & (pick >= own), tf.int32)
            source = first + pick
            n = tf.gather(bank["lengths"], source)
            lo = tf.minimum(ref_min, n)
            length = tf.random.stateless_uniform([], seed, lo, n + 1, tf.int32)
            start = tf.random.stateless_uniform([], seed + 1, 0, n - length + 1, tf.int32)
            ref = tf.gather(bank["mels"], source)[start:start + length]
            ref = tf.pad(ref, [[0, ref_max - length], [0, 0]], constant_values=log_floor)
            ref.set_shape([ref_max, d.n_mels])
            toks = tokens[index]
            element = {"tokens": toks, "token_lengths": tf.shape(toks)[0],
                       "language_ids": tf.gather(languages, index),
                       "mel": mel, "mel_lengths": tf.shape(mel)[0], "ref_mel": ref,
                       "ref_lengths": length}
            return element

        ds = tf.data.TFRecordDataset(shards, num_parallel_reads=min(len(shards), 4))
        if training and self.data_service:
            # shuffle() before group_by_window makes every tf.data service worker produce the
            # whole epoch (TF 2.21); a shuffle of consecutive blocks does not (service.py)
            ds = service_lib.block_shuffle(ds, d.shuffle_buffer, d.seed * 100003 + epoch)
        elif training:
            ds = ds.shuffle(d.shuffle_buffer, seed=d.seed * 100003 + epoch,
                            reshuffle_each_iteration=False)
        ds = ds.map(parse, num_parallel_calls=self._parallel, deterministic=True)
        if training and self.shard:
            ds = ds.filter(lambda r: self._in_shard(r["index"]))
        ds = ds.map(to_element, num_parallel_calls=self._parallel, deterministic=True)
        return self._bucketed(ds, "mel_lengths", {"mel": log_floor}, {"mel": 1})

    def _reference_bank(self, split: str) -> Dict[str, tf.Tensor]:
        """Cached mode's speaker references, sized by speakers, not utterances: the mel starts
        (first ref_frames frames) of up to 32 utterances per speaker, training utterances
        first (`mels` [rows, ref_frames, n_mels], `lengths` [rows]); each speaker's rows are
        `first`[s] .. `first`[s] + `count`[s] - 1, where `count` covers only the training rows
        for the training split (a training item never takes a validation utterance as its
        reference) and all of them for the others; `speaker` [items] and `own` [items] give
        each item of `split` its speaker and its own row within the speaker's rows (-1 when it
        has none). Read from the feature cache once (cache.reference_bank keeps it)."""
        d = self.data_config
        if self._bank is None:
            pools = self.reference_pools
            speakers = sorted({it.speaker for its in self.items.values() for it in its})
            cap = max(2, min(32, 1024 // max(1, len(speakers))))
            train_clips, chosen, rows, blocks = set(), [], {}, {}
            for speaker in speakers:
                start = len(chosen)
                for member in pools.members("val", speaker):
                    if member.clip not in rows and len(chosen) - start < cap:
                        rows[member.clip] = len(chosen) - start
                        chosen.append(member.clip)
                blocks[speaker] = (start, len(chosen))
            position = {}
            for split_name in ("val", "train"):  # a clip in both splits is read from train
                wanted = set(rows)
                for i, item in enumerate(self.items[split_name]):
                    if item.clip in wanted:
                        position[item.clip] = (split_name, i)
                        if split_name == "train":
                            train_clips.add(item.clip)
            members = [position[clip] for clip in chosen]
            for speaker, (start, end) in blocks.items():
                trained = sum(clip in train_clips for clip in chosen[start:end])
                blocks[speaker] = (start, trained, end - start)
            mels, lengths = cache_lib.reference_bank(members, self._shards, self.ref_frames,
                                                     d, self._cache_dir)
            self._bank = (tf.constant(mels), tf.constant(lengths), rows, blocks, speakers)
        mels, lengths, rows, blocks, speakers = self._bank
        speaker_ids = {s: i for i, s in enumerate(speakers)}
        items = self.items[split]
        count_index = 1 if split == "train" else 2
        return {"mels": mels, "lengths": lengths,
                "first": tf.constant([blocks[s][0] for s in speakers], tf.int32),
                "count": tf.constant([blocks[s][count_index] for s in speakers], tf.int32),
                "speaker": tf.constant(np.fromiter((speaker_ids[it.speaker] for it in items),
                                                   np.int32, len(items))),
                "own": tf.constant(np.fromiter((rows.get(it.clip, -1) for it in items),
                                               np.int32, len(items)))}

    # ---- featurization (data device) ------------------------------------------------------------
    def _featurize_batch(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        out = {"tokens": batch["tokens"], "token_lengths": batch["token_lengths"],
               "language_ids": batch["language_ids"]}
        if "audio" in batch:
            out["mel"], out["mel_lengths"] = self._log_mel.masked(batch["audio"],
                                                                  batch["audio_lengths"])
            out["ref_mel"], out["ref_lengths"] = self._log_mel.masked(
                batch["ref_audio"], batch["ref_audio_lengths"])
        else:
            for key in ("mel", "mel_lengths", "ref_mel", "ref_lengths"):
                out[key] = batch[key]
        return out
