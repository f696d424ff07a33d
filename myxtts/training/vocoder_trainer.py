"""VocoderTrainer: trains the HiFi-GAN vocoder on the model device from segments the data device
featurized (myxtts.data.segments), with the acoustic trainer's machinery (myxtts.training.base):
precision plan, the training loop, CheckpointStore (auto-resume, --resume-from, --reset-training,
best/), TrainingMonitor (TensorBoard scalars, mel images and audio of fixed validation clips),
SIGINT/SIGTERM save.

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
from typing import Dict, Optional

import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.data.audio import LogMel
from myxtts.model_info import update_model_info
from myxtts.training.base import Batch, Trainer, TrainingStopped
from myxtts.training.checkpoints import CheckpointError, CheckpointStore, resolve_checkpoint_path
from myxtts.training.gan_step import GANStep
from myxtts.training.monitoring import Throughput, TrainingMonitor
from myxtts.vocoder.discriminators import MultiPeriodDiscriminator, MultiScaleDiscriminator
from myxtts.vocoder.generator import PRESETS, build_generator

logger = logging.getLogger("myxtts.training")

STAGE = "vocoder"


class VocoderTrainer(Trainer):
    SCORE_NAME = "validation mel L1"

    def __init__(self, config: XTTSConfig, model_device: Optional[str] = None, *,
                 init_from: Optional[str] = None, resume_checkpoint: Optional[str] = None,
                 reset_training: bool = False):
        self._start_run(config, model_device)
        self._consecutive_nonfinite = 0  # the GAN step's non-finite streak, read every step
        tc, v = config.training, config.vocoder
        self.log_mel = LogMel.from_config(config.data)
        self._clips: Optional[Dict[str, tf.Tensor]] = None
        self._recordings_logged = False
        preset = PRESETS[v.preset]
        with tf.device(self.model_device):
            logger.info("Creating the %s vocoder (%s discriminators) on device: %s",
                        v.generator if v.generator == "vocos" else f"{v.preset} HiFi-GAN",
                        v.preset, self.model_device)
            self.generator = build_generator(config)
            self.mpd = MultiPeriodDiscriminator(v.mpd_periods, preset.discriminator_width)
            self.msd = MultiScaleDiscriminator(v.msd_scales, preset.discriminator_width,
                                               preset.grouped_msd)
            self.step = GANStep(self.generator, self.mpd, self.msd, v, self.log_mel,
                                model_device=self.model_device,
                                loss_scaling=self.precision.loss_scaling, jit_compile=tc.xla)
            self._create_run_counters()
            self._val_compiled = tf.function(self._val_step, jit_compile=tc.xla)
        self._log_placement()
        self.checkpoints = CheckpointStore(self.directory, {
            "generator": self.generator, "mpd": self.mpd, "msd": self.msd,
            "generator_optimizer": self.step.gen.optimizer,
            "discriminator_optimizer": self.step.disc.optimizer, "step": self.step.step,
            "generator_nonfinite_total": self.step.gen.nonfinite_total,
            "discriminator_nonfinite_total": self.step.disc.nonfinite_total,
            **self.run_counters(),
        }, keep=tc.keep_checkpoints)
        if self._restore(resume_checkpoint, reset_training):
            if init_from:
                logger.warning("--vocoder-init %s ignored: the run resumed from a checkpoint of "
                               "its own instead.", init_from)
        elif init_from:
            self._init_from(init_from)
        self.checkpoints.write_sidecars(config, None)
        update_model_info(self.directory, stage=STAGE)

    @property
    def global_step(self) -> int:
        return int(self.step.step.numpy())

    @property
    def variables(self):
        """Every variable of the models and both optimizers."""
        return [*self.generator.variables, *self.mpd.variables, *self.msd.variables,
                *self.step.gen.optimizer.variables, *self.step.disc.optimizer.variables]

    def _log_placement(self) -> None:
        logger.info("Vocoder: generator %s parameters (%s), multi-period "
                    "discriminator %s, multi-scale discriminator %s; two %s optimizers with "
                    "%d variables; all on %s", self._parameters(self.generator),
                    self.generator.describe(),
                    self._parameters(self.mpd), self._parameters(self.msd),
                    type(self.step.gen.optimizer).__name__,
                    len(self.step.gen.optimizer.variables) +
                    len(self.step.disc.optimizer.variables), self._placement(self.variables))

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
    def _run_step(self, batch: Batch) -> Dict[str, tf.Tensor]:
        """One generator/discriminator update. Unlike the acoustic loop it reads the step (for
        the warm-up switch, a Python bool that picks the compiled graph) and the non-finite
        streak back every step: the GAN step is long enough that this costs little."""
        warmup = self.config.vocoder.generator_warmup_steps
        step = self.global_step
        if warmup and step == warmup:
            logger.info("Generator warm-up done (%d steps): the discriminators start.", warmup)
        out = self.step(batch, step >= warmup)
        self.batch_in_epoch.assign_add(1)
        self.frames.assign_add(batch["mel"].shape[0] * batch["mel"].shape[1])
        self._consecutive_nonfinite = int(out["consecutive_nonfinite"])
        if self._consecutive_nonfinite >= self.config.training.max_nonfinite_steps:
            self._stop_if_nonfinite()
        return out

    def _micro_batches_done(self) -> int:
        return self.global_step

    @staticmethod
    def _updates_after(micro: int) -> bool:
        return True

    def _log(self, monitor: TrainingMonitor, throughput: Throughput, step: int) -> None:
        results = self.step.metric_results()
        scalars = {f"loss/{k}": v for k, v in results.items() if not k.startswith("grad")}
        scalars.update(grad_norm=results["grad_norm"],
                       grad_norm_discriminator=results["grad_norm_discriminator"],
                       learning_rate=self.step.learning_rate(),
                       loss_scale=self.step.gen.loss_scale(),
                       loss_scale_discriminator=self.step.disc.loss_scale(),
                       **throughput.figures())
        monitor.log_train(step, int(self.epoch.numpy()), scalars)
        self.step.reset_metrics()

    def _stop_if_nonfinite(self) -> None:
        tc, v = self.config.training, self.config.vocoder
        if self._consecutive_nonfinite < tc.max_nonfinite_steps:
            return
        raise TrainingStopped(
            f"Vocoder training stopped: {tc.max_nonfinite_steps} consecutive non-finite "
            f"updates at step {self.global_step} (skipped, nothing saved; the last good "
            f"checkpoint {self.checkpoints.latest or 'none'} is intact). Try a lower --lr (now "
            f"{v.learning_rate:g}) or --precision fp32.")

    # -- validation ----------------------------------------------------------------------------
    def _val_step(self, mel, mel_lengths):
        with tf.device(self.model_device):
            audio = self.generator(mel, training=False)
            generated = self.log_mel(audio)[:, :tf.shape(mel)[1]]
            mask = tf.cast(tf.sequence_mask(mel_lengths, tf.shape(mel)[1]), tf.float32)
            per_frame = tf.reduce_mean(tf.abs(generated - mel), axis=-1)
            l1 = tf.reduce_sum(per_frame * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
            return audio, generated, l1

    def _has_validation(self, pipeline) -> bool:
        return bool(pipeline.items["val"])

    def validate(self, pipeline, monitor: Optional[TrainingMonitor] = None) -> bool:
        """Mel L1 of the fixed validation clips; keeps best/ and model_info.json up to date.
        Returns True when early stopping triggers."""
        if self._clips is None:
            self._clips = pipeline.validation_clips(self.model_device)
        clips = self._clips
        audio, generated, l1 = self._val_compiled(clips["mel"], clips["mel_lengths"])
        val_loss = float(l1)
        improved = self._record_validation(val_loss, val_loss, [(self.SCORE_NAME, val_loss)])
        if monitor is not None:
            hop = self.config.data.hop_length
            lengths = clips["mel_lengths"].numpy()
            n = int(lengths[0])
            images = {"mel/target": clips["mel"][0, :n].numpy().T,
                      "mel/generated": generated[0, :n].numpy().T}
            sounds = {f"audio/clip{i}_vocoder": audio[i, :int(k) * hop].numpy()
                      for i, k in enumerate(lengths)}
            if not self._recordings_logged:  # the references, once per run
                self._recordings_logged = True
                sounds.update({f"audio/clip{i}_recording": clips["audio"][i, :int(k) * hop]
                               .numpy() for i, k in enumerate(lengths)})
            monitor.log_validation(self.global_step,
                                   {"loss/objective": val_loss, "loss/mel": val_loss},
                                   images, sounds, improved)
        return self._after_validation(val_loss)

    def _oom_message(self, error: Exception) -> str:
        v = self.config.vocoder
        return (f"Out of memory on {self.model_device} at vocoder step {self.global_step} "
                f"({str(error).splitlines()[0][:200]}). Lower --batch-size (now {v.batch_size}) "
                f"or vocoder.segment_frames (now {v.segment_frames}), or use a smaller "
                f"vocoder.preset (now {v.preset}). The last good checkpoint "
                f"({self.checkpoints.latest or 'none yet'}) is intact.")
