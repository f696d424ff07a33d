"""VocoderTrainer: trains the HiFi-GAN vocoder on the model device from segments the data device
featurized (myxtts.data.segments), with the acoustic trainer's machinery: precision plan,
CheckpointStore (auto-resume, --resume-from, --reset-training, best/), TrainingMonitor
(TensorBoard scalars, mel images and audio of fixed validation clips), SIGINT/SIGTERM save.

    trainer = VocoderTrainer(config, model_device=plan.model_device, init_from=None)
    summary = trainer.fit(pipeline)          # a SegmentPipeline

Generator, both discriminators, both optimizers (each with its own loss scale under float16),
counters and metrics are created inside `tf.device(model_device)`. `init_from` (a vocoder
checkpoint directory) starts a NEW run from its generator and discriminator weights
(fine-tuning); an existing checkpoint in training.checkpoint_dir takes precedence (resume).
Best-by-validation is the log10-mel L1 of the generator's audio of the fixed validation clips.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from typing import Dict, Optional

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.data.audio import LogMel
from myxtts.errors import MyXTTSError
from myxtts.model_info import update_model_info
from myxtts.training.checkpoints import (CheckpointError, CheckpointStore,
                                         resolve_checkpoint_path)
from myxtts.training.gan_step import GANStep
from myxtts.training.monitoring import Throughput, TrainingMonitor
from myxtts.training.precision import apply_precision, resolve_precision
from myxtts.training.signals import install_stop_handlers, restore_handlers
from myxtts.training.trainer import FitSummary, TrainingStopped
from myxtts.vocoder.discriminators import MultiPeriodDiscriminator, MultiScaleDiscriminator
from myxtts.vocoder.generator import PRESETS, HiFiGANGenerator

logger = logging.getLogger("myxtts.training")

STAGE = "vocoder"


class VocoderTrainer:
    def __init__(self, config: XTTSConfig, model_device: Optional[str] = None, *,
                 init_from: Optional[str] = None, resume_checkpoint: Optional[str] = None,
                 reset_training: bool = False):
        self.config = config
        tc, v = config.training, config.vocoder
        self.model_device = model_device or (
            "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0")
        self.directory = tc.checkpoint_dir
        self._stop_signal: Optional[int] = None
        self._last_save = time.monotonic()
        self.precision = resolve_precision(tc.precision, self.model_device, tc.tf32)
        apply_precision(self.precision)
        keras.utils.set_random_seed(tc.seed)
        self.log_mel = LogMel.from_config(config.data)
        preset = PRESETS[v.preset]
        with tf.device(self.model_device):
            logger.info("Creating the %s HiFi-GAN vocoder on device: %s", v.preset,
                        self.model_device)
            self.generator = HiFiGANGenerator.from_config(config)
            self.mpd = MultiPeriodDiscriminator(v.mpd_periods, preset.discriminator_width)
            self.msd = MultiScaleDiscriminator(v.msd_scales, preset.discriminator_width,
                                               preset.grouped_msd)
            self.step = GANStep(self.generator, self.mpd, self.msd, v, self.log_mel,
                                model_device=self.model_device,
                                loss_scaling=self.precision.loss_scaling, jit_compile=tc.xla)
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False,
                                              name="batch_in_epoch")
            self.best_val_loss = tf.Variable(math.inf, dtype=tf.float32, trainable=False,
                                             name="best_val_loss")
            self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
            self.bad_validations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="bad_validations")
            self._val_compiled = tf.function(self._val_step, jit_compile=tc.xla)
        self._log_placement()
        self.checkpoints = CheckpointStore(self.directory, {
            "generator": self.generator, "mpd": self.mpd, "msd": self.msd,
            "generator_optimizer": self.step.gen.optimizer,
            "discriminator_optimizer": self.step.disc.optimizer, "step": self.step.step,
            "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "generator_nonfinite_total": self.step.gen.nonfinite_total,
            "discriminator_nonfinite_total": self.step.disc.nonfinite_total,
            "best_val_loss": self.best_val_loss, "best_step": self.best_step,
            "bad_validations": self.bad_validations,
        }, keep=tc.keep_checkpoints)
        self._restore(resume_checkpoint, reset_training, init_from)
        self.checkpoints.write_sidecars(config, None)
        update_model_info(self.directory, stage=STAGE)

    @property
    def global_step(self) -> int:
        return int(self.step.step.numpy())

    @property
    def variables(self):
        """Every variable the vocoder owns (models, both optimizers, counters)."""
        return [*self.generator.variables, *self.mpd.variables, *self.msd.variables,
                *self.step.gen.optimizer.variables, *self.step.disc.optimizer.variables]

    def _log_placement(self) -> None:
        devices = sorted({v.value.device.rsplit("/", 1)[-1].replace("device:", "")
                          for v in self.variables})
        count = lambda m: sum(int(np.prod(w.shape)) for w in m.trainable_variables)  # noqa: E731
        logger.info("Vocoder: generator %s parameters (upsampling %s), multi-period "
                    "discriminator %s, multi-scale discriminator %s; two %s optimizers with "
                    "%d variables; all on %s", f"{count(self.generator):,}",
                    "x".join(map(str, self.generator.upsample_rates)), f"{count(self.mpd):,}",
                    f"{count(self.msd):,}", type(self.step.gen.optimizer).__name__,
                    len(self.step.gen.optimizer.variables) +
                    len(self.step.disc.optimizer.variables), ", ".join(devices))

    def _restore(self, resume_checkpoint: Optional[str], reset: bool,
                 init_from: Optional[str]) -> None:
        store = self.checkpoints
        if reset:
            if resume_checkpoint:
                raise MyXTTSError("--reset-training and --resume-from contradict each other: "
                                  "pass one of them.")
            store.archive("--reset-training")
        elif resume_checkpoint:
            path = resolve_checkpoint_path(resume_checkpoint)
            latest = store.latest
            step = store.restore(path)
            logger.info("Resumed the vocoder from %s (--resume-from) at step %d.", path, step)
            if latest and os.path.abspath(latest) != os.path.abspath(path):
                store.archive(f"--resume-from {path}")
            return
        elif store.latest:
            step = store.restore(store.latest)
            logger.info("Resumed the vocoder from %s at step %d (epoch %d). Pass "
                        "--reset-training to start over.", store.latest, step,
                        int(self.epoch.numpy()) + 1)
            if init_from:
                logger.warning("--vocoder-init %s ignored: %s already holds checkpoints of this "
                               "run, which was resumed instead.", init_from, self.directory)
            return
        if init_from:
            self._init_from(init_from)
        else:
            logger.info("No checkpoint in %s: the vocoder starts from step 0.", self.directory)

    def _init_from(self, directory: str) -> None:
        """Fine-tuning: generator and discriminator weights of another vocoder run; fresh
        optimizers and counters."""
        path = resolve_checkpoint_path(directory)
        weights = tf.train.Checkpoint(generator=self.generator, mpd=self.mpd, msd=self.msd)
        try:
            weights.restore(path).expect_partial().assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            raise CheckpointError(
                f"--vocoder-init {directory}: {path} does not hold this vocoder's weights "
                f"({str(e).splitlines()[0][:200]}). It must be a vocoder checkpoint "
                f"(train_main.py --stage vocoder) with the same vocoder.preset, upsampling and "
                f"data.n_mels as --config (compare with {directory}/config.yaml).") from None
        logger.info("Fine-tuning from %s (--vocoder-init): generator and discriminator weights "
                    "loaded; optimizers and step start fresh.", path)

    # -- training ------------------------------------------------------------------------------
    def fit(self, pipeline) -> FitSummary:
        """Trains until training.max_steps, training.epochs, early stopping or a signal."""
        tc = self.config.training
        start = self.global_step
        if tc.max_steps and start >= tc.max_steps:
            logger.info("Already at step %d >= --max-steps %d: nothing to train.", start,
                        tc.max_steps)
            return FitSummary(start, int(self.epoch.numpy()), "max_steps",
                              self.checkpoints.latest, self._best_or_none())
        self._clips = pipeline.validation_clips(self.model_device)
        self._recordings_logged = False
        monitor = TrainingMonitor(os.path.join(self.directory, "tensorboard"),
                                  tc.max_steps or None, start, self.config.data.sample_rate)
        previous = install_stop_handlers(self._on_stop_signal)
        try:
            return self._fit(pipeline, monitor)
        finally:
            restore_handlers(previous)
            monitor.close()

    def _on_stop_signal(self, signum: int) -> None:
        self._stop_signal = signum

    def _fit(self, pipeline, monitor: TrainingMonitor) -> FitSummary:
        tc, v = self.config.training, self.config.vocoder
        throughput = Throughput()
        self._last_save = time.monotonic()
        first_loss = last_loss = None
        reason = None
        while reason is None:
            epoch = int(self.epoch.numpy())
            if epoch >= tc.epochs:
                reason = "epochs"
                break
            skip = int(self.batch_in_epoch.numpy())
            with pipeline.train_batches(epoch, self.model_device, skip_batches=skip) as feeder:
                waited = 0.0
                for batch in feeder:
                    adversarial = self.global_step >= v.generator_warmup_steps
                    if self.global_step == v.generator_warmup_steps and adversarial and \
                            v.generator_warmup_steps:
                        logger.info("Generator warm-up done (%d steps): the discriminators "
                                    "start.", v.generator_warmup_steps)
                    started = time.monotonic()
                    try:
                        out = self.step(batch, adversarial)
                        total = float(out["total"])
                    except tf.errors.ResourceExhaustedError as e:
                        raise TrainingStopped(self._oom_message(e)) from None
                    throughput.add(feeder.wait_seconds - waited, time.monotonic() - started,
                                   pipeline.batch_size * pipeline.frames)
                    waited = feeder.wait_seconds
                    self.batch_in_epoch.assign_add(1)
                    last_loss = total
                    first_loss = total if first_loss is None else first_loss
                    monitor.progress(total, throughput)
                    if int(out["consecutive_nonfinite"]) >= tc.max_nonfinite_steps:
                        raise TrainingStopped(
                            f"Vocoder training stopped: {tc.max_nonfinite_steps} consecutive "
                            f"non-finite updates at step {self.global_step} (skipped, nothing "
                            f"saved; the last good checkpoint {self.checkpoints.latest or 'none'}"
                            f" is intact). Try a lower --lr (now {v.learning_rate:g}) or "
                            f"--precision fp32.")
                    reason = self._after_update(monitor, throughput)
                    if reason:
                        break
                else:
                    self.epoch.assign_add(1)
                    self.batch_in_epoch.assign(0)
        path = self._save()
        logger.info("Vocoder training stopped at step %d (%s). Checkpoint: %s",
                    self.global_step, reason, path or self.checkpoints.latest)
        return FitSummary(self.global_step, int(self.epoch.numpy()), reason,
                          path or self.checkpoints.latest, self._best_or_none(), first_loss,
                          last_loss)

    def _after_update(self, monitor: TrainingMonitor, throughput: Throughput) -> Optional[str]:
        tc = self.config.training
        step = self.global_step
        if step % tc.log_every_steps == 0:
            results = self.step.metric_results()
            scalars = {f"loss/{k}": v for k, v in results.items() if not k.startswith("grad")}
            scalars.update(grad_norm=results["grad_norm"],
                           grad_norm_discriminator=results["grad_norm_discriminator"],
                           learning_rate=self.step.learning_rate(),
                           loss_scale=self.step.gen.loss_scale(),
                           loss_scale_discriminator=self.step.disc.loss_scale(),
                           frames_per_second=throughput.frames_per_second,
                           data_wait_fraction=throughput.data_wait_fraction)
            monitor.log_train(step, int(self.epoch.numpy()), scalars)
            self.step.reset_metrics()
            throughput.reset()
        if self._stop_signal is not None:
            return f"signal {signal.Signals(self._stop_signal).name}"
        if self._clips is not None and step % tc.validate_every_steps == 0:
            stop = self.validate(monitor)
            throughput.reset()
            if stop:
                return "early_stopping"
        if tc.max_steps and step >= tc.max_steps:
            return "max_steps"
        if (step % tc.checkpoint_every_steps == 0
                or (time.monotonic() - self._last_save) / 60.0 >= tc.checkpoint_every_minutes):
            self._save()
        return None

    # -- validation ----------------------------------------------------------------------------
    def _val_step(self, mel, mel_lengths):
        with tf.device(self.model_device):
            audio = self.generator(mel, training=False)
            generated = self.log_mel(audio)[:, :tf.shape(mel)[1]]
            mask = tf.cast(tf.sequence_mask(mel_lengths, tf.shape(mel)[1]), tf.float32)
            per_frame = tf.reduce_mean(tf.abs(generated - mel), axis=-1)
            l1 = tf.reduce_sum(per_frame * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
            return audio, generated, l1

    def validate(self, monitor: Optional[TrainingMonitor] = None) -> bool:
        """Mel L1 of the fixed validation clips; keeps best/ and model_info.json up to date.
        Returns True when early stopping triggers."""
        tc = self.config.training
        clips = self._clips
        audio, generated, l1 = self._val_compiled(clips["mel"], clips["mel_lengths"])
        val_loss = float(l1)
        step = self.global_step
        improved = val_loss < float(self.best_val_loss.numpy())
        if improved:
            self.best_val_loss.assign(val_loss)
            self.best_step.assign(step)
            self.bad_validations.assign(0)
            self.checkpoints.save_best(step)
        else:
            self.bad_validations.assign_add(1)
        if monitor is not None:
            hop = self.config.data.hop_length
            lengths = clips["mel_lengths"].numpy()
            n = int(lengths[0])
            images = {"mel/target": clips["mel"][0, :n].numpy().T,
                      "mel/generated": generated[0, :n].numpy().T}
            sounds = {f"audio/clip{i}_hifigan": audio[i, :int(k) * hop].numpy()
                      for i, k in enumerate(lengths)}
            if not self._recordings_logged:  # the references, once per run
                self._recordings_logged = True
                sounds.update({f"audio/clip{i}_recording": clips["audio"][i, :int(k) * hop]
                               .numpy() for i, k in enumerate(lengths)})
            monitor.log_validation(step, {"loss/objective": val_loss, "loss/mel": val_loss},
                                   images, sounds, improved)
        update_model_info(self.directory, steps_trained=step, best_val_loss=self._best_or_none(),
                          best_step=int(self.best_step.numpy()), last_val_loss=val_loss)
        patience = tc.early_stopping_patience
        if patience and int(self.bad_validations.numpy()) >= patience:
            logger.warning("Early stopping: validation mel L1 has not improved for %d "
                           "validations (best %.4f at step %d, saved in %s).", patience,
                           float(self.best_val_loss.numpy()), int(self.best_step.numpy()),
                           self.checkpoints.best)
            return True
        return False

    # -- checkpoints ---------------------------------------------------------------------------
    def _save(self) -> Optional[str]:
        path = self.checkpoints.save(self.global_step)
        self._last_save = time.monotonic()
        update_model_info(self.directory, steps_trained=self.global_step,
                          best_val_loss=self._best_or_none(), precision=self.precision.policy)
        return path

    def _best_or_none(self) -> Optional[float]:
        best = float(self.best_val_loss.numpy())
        return None if math.isinf(best) else best

    def _oom_message(self, error: Exception) -> str:
        v = self.config.vocoder
        return (f"Out of memory on {self.model_device} at vocoder step {self.global_step} "
                f"({str(error).splitlines()[0][:200]}). Lower --batch-size (now {v.batch_size}) "
                f"or vocoder.segment_frames (now {v.segment_frames}), or use a smaller "
                f"vocoder.preset (now {v.preset}). The last good checkpoint "
                f"({self.checkpoints.latest or 'none yet'}) is intact.")
