"""The vocoder's input pipeline: random fixed-length waveform segments cut on the host, their
log-mels computed on the data device, handed to the model device by a DeviceFeeder.

    pipeline = SegmentPipeline(config, train_dir, val_dir, data_device=plan.data_device,
                               work_dir=checkpoint_dir)
    pipeline.use_teacher_forced_mels(paths)    # optional: {item id: .npy} (myxtts.training.gta)
    feeder = pipeline.train_batches(epoch, model_device, skip_batches=0)   # DeviceFeeder
    clips = pipeline.validation_clips(model_device)                       # fixed clips or None

A training batch holds (docs/vocoder.md):

    audio       float32 [B, F * hop]   the segment (zero-padded when the utterance is shorter)
    mel         float32 [B, F, n_mels] the generator's input: log10 mel of the segment, or the
                                       acoustic model's teacher-forced mel frames (--gta-from)
    mel_target  float32 [B, F, n_mels] log10 mel of the segment (the mel loss target)

F = vocoder.segment_frames; frame i of a segment is centred on its sample i * hop, so the
generator's samples [i*hop, (i+1)*hop) belong to frame i. Rows are validated exactly like the
acoustic model's (myxtts.data.prepare); one epoch = one segment from every training utterance,
in an order seeded by (data.seed, epoch), so a resumed run skips the batches it trained on.
"""

from __future__ import annotations

import logging
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from myxtts.data import audio as audio_lib
from myxtts.data import cache as cache_lib
from myxtts.data.feeder import DeviceFeeder
from myxtts.data.prepare import prepare_dataset

logger = logging.getLogger("myxtts.data")


class SegmentPipeline:
    """Validated utterances → random segments (host) → log-mels (data device) → model device."""

    def __init__(self, config, train_dir: str, val_dir: Optional[str] = None, *,
                 data_device: str = "/CPU:0", work_dir: Optional[str] = None):
        self.config = config
        d, v = config.data, config.vocoder
        self.data_device = data_device
        prepared = prepare_dataset(config, train_dir, val_dir, work_dir)
        self.report = prepared.report
        self.items = prepared.items
        logger.info("%s\n  validation rows: %s", self.report.table(), prepared.val_source)
        self.frames = v.segment_frames
        self.samples = v.segment_frames * d.hop_length
        self.batch_size = v.batch_size
        self.gta_mels: Optional[Dict[str, str]] = None
        if len(self.items["train"]) < self.batch_size:
            logger.warning("Only %d training utterances for vocoder.batch_size %d: each epoch "
                           "repeats utterances to fill one batch.", len(self.items["train"]),
                           self.batch_size)
        self.train_steps_per_epoch = max(1, len(self.items["train"]) // self.batch_size)
        self._log_mel = audio_lib.LogMel.from_config(d)
        # XLA fuses framing, the float64 FFT and the mel projection (one static shape).
        self._featurize = tf.function(self._featurize_batch, jit_compile=True)
        logger.info("Vocoder segments: %d frames (%d samples, %.2f s), %d per batch, %d batches "
                    "per epoch.", self.frames, self.samples, self.samples / d.sample_rate,
                    self.batch_size, self.train_steps_per_epoch)

    def use_teacher_forced_mels(self, paths: Dict[str, str]) -> None:
        """Generator input from now on: {item id: .npy of its teacher-forced log10 mel
        [frames, n_mels]} (myxtts.training.gta); segments are cut at the same frames of the mel
        and the recording, and the mel loss still compares with the recording's own mel."""
        missing = [it.id for it in self.items["train"] if it.id not in paths]
        if missing:
            raise ValueError(f"No teacher-forced mel for {len(missing)} training items, e.g. "
                             f"{missing[0]}.")
        self.gta_mels = dict(paths)
        logger.info("Vocoder input: teacher-forced mels of %d training utterances (--gta-from).",
                    len(paths))

    # ---- training ------------------------------------------------------------------------------
    def train_dataset(self, epoch: int, *, skip_batches: int = 0) -> tf.data.Dataset:
        """Epoch `epoch`'s segment batches on the data device (not yet featurized)."""
        d = self.config.data
        items = self.items["train"]
        count = self.train_steps_per_epoch * self.batch_size
        order = np.random.default_rng([d.seed, epoch]).permutation(
            np.resize(np.arange(len(items)), max(count, len(items))))[:count]
        hop, frames, n_mels = d.hop_length, self.frames, d.n_mels

        def load(index, position):
            i = int(index)
            item = items[i]
            samples = cache_lib.load_samples(item, d)
            rng = np.random.default_rng([d.seed, epoch, int(position)])
            gta = None
            if self.gta_mels is not None:
                gta = np.load(self.gta_mels[item.id], allow_pickle=False)
            available = len(samples) // hop if gta is None else min(len(gta), len(samples) // hop)
            start = int(rng.integers(0, max(available - frames, 0) + 1))
            audio = np.zeros(self.samples, np.float32)
            piece = samples[start * hop:(start + frames) * hop]
            audio[:len(piece)] = piece
            mel = np.zeros([frames, n_mels], np.float32)
            if gta is not None:
                part = gta[start:start + frames]
                mel[:len(part)] = part
                mel[len(part):] = np.log10(d.mel_floor)
            return audio, mel

        def element(index, position):
            audio, mel = tf.numpy_function(load, [index, position], (tf.float32, tf.float32),
                                           stateful=False)
            audio.set_shape([self.samples])
            mel.set_shape([frames, n_mels])
            return {"audio": audio, "gta_mel": mel}

        ds = tf.data.Dataset.from_tensor_slices((order.astype(np.int64),
                                                 np.arange(count, dtype=np.int64)))
        ds = ds.map(element, num_parallel_calls=d.num_workers or tf.data.AUTOTUNE,
                    deterministic=True)
        ds = ds.batch(self.batch_size, drop_remainder=True)
        if skip_batches:
            ds = ds.skip(skip_batches)
        options = tf.data.Options()
        options.deterministic = True
        ds = ds.with_options(options)
        # prefetch_to_device must be the last transformation (TensorFlow requires it).
        return ds.apply(tf.data.experimental.prefetch_to_device(self.data_device,
                                                                buffer_size=d.buffer_size))

    def featurize(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        return self._featurize(batch)

    def _featurize_batch(self, batch):
        target = self._log_mel(batch["audio"])[:, :self.frames]
        mel = batch["gta_mel"] if self.gta_mels is not None else target
        return {"audio": batch["audio"], "mel": mel, "mel_target": target}

    def train_batches(self, epoch: int, model_device: str, *, skip_batches: int = 0,
                      capacity: int = 2) -> DeviceFeeder:
        return DeviceFeeder(self.train_dataset(epoch, skip_batches=skip_batches),
                            self.featurize, self.data_device, model_device, capacity,
                            name=f"vocoder-epoch{epoch}")

    # ---- validation ----------------------------------------------------------------------------
    def validation_clips(self, model_device: str) -> Optional[Dict[str, tf.Tensor]]:
        """The first vocoder.val_clips validation utterances (at most vocoder.val_clip_seconds
        each, whole hops) as one zero-padded batch on `model_device`: audio [N, S], mel
        [N, T, n_mels] (real log10 mels, padding at log10(mel_floor)), mel_lengths [N]. None
        without validation rows."""
        d, v = self.config.data, self.config.vocoder
        items = self.items["val"][:v.val_clips]
        if not items:
            return None
        limit = int(v.val_clip_seconds * d.sample_rate) // d.hop_length
        clips = []
        for item in items:
            samples = cache_lib.load_samples(item, d)
            frames = max(1, min(limit, len(samples) // d.hop_length))
            clips.append(np.pad(samples[:frames * d.hop_length],
                                (0, max(0, frames * d.hop_length - len(samples)))))
        longest = max(len(c) for c in clips)
        audio = np.stack([np.pad(c, (0, longest - len(c))) for c in clips]).astype(np.float32)
        lengths = np.array([len(c) // d.hop_length for c in clips], np.int32)
        with tf.device(self.data_device):
            mel, _ = self._log_mel.masked(tf.constant(audio), tf.constant(lengths * d.hop_length))
            mel = mel[:, :longest // d.hop_length]
            mask = tf.sequence_mask(lengths, tf.shape(mel)[1])[:, :, None]
            mel = tf.where(mask, mel, np.float32(np.log10(d.mel_floor)))
        with tf.device(model_device):
            return {"audio": tf.identity(tf.constant(audio)), "mel": tf.identity(mel),
                    "mel_lengths": tf.identity(tf.constant(lengths))}
