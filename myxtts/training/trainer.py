"""XTTSTrainer: trains XTTSModel on the model device from batches the data device prepared.

    trainer = XTTSTrainer(config, model_device=plan.model_device, tokenizer=tokenizer)
    summary = trainer.fit(pipeline)          # a myxtts.data.pipeline.InputPipeline

Everything the model owns is created inside `tf.device(model_device)`: weights, the BUILT
optimizer (slots, iteration counter, learning rate, loss-scale state), the step and epoch
counters, gradient accumulators and metrics. Each step is one `tf.function(jit_compile=
training.xla)` run under that device (myxtts.training.step). Checkpoints (myxtts.training.
checkpoints) resume automatically from the latest in training.checkpoint_dir; a new run can
start from another run's model weights instead (`init_from`, myxtts.training.warm_start).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import signal
import threading
import time
from typing import Dict, Iterable, List, Optional

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.errors import MyXTTSError
from myxtts.evaluation.metrics import alignment_measures
from myxtts.finetune import RESUME_CONFLICT, locate_source
from myxtts.inference.checkpoint_loading import resolve_checkpoint, restore_model
from myxtts.inference.griffin_lim import GriffinLim
from myxtts.model_info import read_model_info, update_model_info
from myxtts.models.xtts import XTTSModel
from myxtts.training.checkpoints import (CheckpointStore, checkpoint_step,
                                         resolve_checkpoint_path)
from myxtts.training.losses import compute_losses
from myxtts.training.monitoring import Throughput, TrainingMonitor
from myxtts.training.optimization import build_optimizer
from myxtts.training.precision import apply_precision, resolve_precision
from myxtts.training.step import TrainStep
from myxtts.training.warm_start import SourceRows, copy_source_weights, training_plan

logger = logging.getLogger("myxtts.training")

# compute_losses' keys (myxtts/training/losses.py); "total" is the one differentiated.
LOSS_NAMES = ("total", "objective", "mel", "postnet", "stop", "guided_attention",
              "guided_attention_weight")

Batch = Dict[str, tf.Tensor]


class TrainingStopped(MyXTTSError, RuntimeError):
    """Training cannot go on (non-finite loss streak, out of memory); the message says why and
    what to change. The last good checkpoint is untouched."""


@dataclasses.dataclass
class FitSummary:
    """How a `fit` call ended."""

    step: int
    epoch: int
    reason: str  # "max_steps" | "epochs" | "early_stopping" | "signal SIGTERM" | ...
    checkpoint: Optional[str]
    best_val_loss: Optional[float]
    first_loss: Optional[float] = None
    last_loss: Optional[float] = None


def _timed(batches: Iterable[Batch]):
    """Yields (batch, seconds the caller waited for it)."""
    iterator = iter(batches)
    while True:
        started = time.monotonic()
        batch = next(iterator, None)
        if batch is None:
            return
        yield batch, time.monotonic() - started


def _mean_measures(prefix: str, measures: List[Dict[str, float]]) -> Dict[str, float]:
    """{"<prefix>/focus": mean focus, ...} over items."""
    if not measures:
        return {}
    return {f"{prefix}/{k}": float(np.mean([m[k] for m in measures])) for k in measures[0]}


def _default_device() -> str:
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


class XTTSTrainer:
    """Builds model, optimizer and counters on `model_device`, restores the latest checkpoint
    (or `resume_checkpoint`), and trains with `fit`.

    `tokenizer` (myxtts.data.text.Tokenizer) gives the vocabulary size when `model` is None and
    is saved as vocab.json. `reset_training` archives earlier checkpoints and starts at step 0.
    `init_from` (a run directory, DIR/best or a checkpoint prefix) starts a run that has no
    checkpoint yet from that run's model weights: fresh optimizer, step 0; `config` must take
    its model fields from that run (myxtts.finetune.warm_start_config) and `tokenizer` must
    extend its vocabulary.
    """

    def __init__(self, config: XTTSConfig, model: Optional[keras.Model] = None,
                 resume_checkpoint: Optional[str] = None, model_device: Optional[str] = None,
                 *, tokenizer=None, reset_training: bool = False,
                 init_from: Optional[str] = None):
        self.config = config
        tc = config.training
        self.model_device = model_device or _default_device()
        self.directory = tc.checkpoint_dir
        self.tokenizer = tokenizer
        if init_from and resume_checkpoint:
            raise MyXTTSError(RESUME_CONFLICT)
        self._stop_signal: Optional[int] = None
        self._last_save = time.monotonic()
        self._griffin_lim: Optional[GriffinLim] = None
        self.precision = resolve_precision(tc.precision, self.model_device, tc.tf32)
        apply_precision(self.precision)
        keras.utils.set_random_seed(tc.seed)

        with tf.device(self.model_device):
            if model is None:
                if tokenizer is None:
                    raise MyXTTSError("XTTSTrainer needs a tokenizer (for the vocabulary size) "
                                      "when no model is passed.")
                logger.info("Creating model on device: %s", self.model_device)
                model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                                  config.data.n_mels)
            self.model = model
            # Before the optimizer is built: frozen variables get no slots.
            update_scales = training_plan(
                model, tc.freeze, tc.pretrained_lr_scale,
                self._source_rows(init_from, resume_checkpoint, reset_training))
            self.optimizer = build_optimizer(tc, model, self.precision.loss_scaling)
            self.step = TrainStep(model, self.optimizer, self._losses, loss_names=LOSS_NAMES,
                                  model_device=self.model_device,
                                  grad_accum_steps=tc.grad_accum_steps, jit_compile=tc.xla,
                                  update_scales=update_scales)
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
            # Micro-batches of the current epoch already trained on (the data position).
            self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False,
                                              name="batch_in_epoch")
            self.best_val_loss = tf.Variable(math.inf, dtype=tf.float32, trainable=False,
                                             name="best_val_loss")
            self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
            self.bad_validations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="bad_validations")
            self.val_metrics = {name: keras.metrics.Mean(name=f"val_{name}")
                                for name in LOSS_NAMES}
            self._val_compiled = tf.function(self._val_step, jit_compile=tc.xla)
        self._log_placement()

        self.checkpoints = CheckpointStore(self.directory, {
            "model": model, "optimizer": self.optimizer, "step": self.step.step,
            "epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
            "nonfinite_total": self.step.nonfinite_total, "best_val_loss": self.best_val_loss,
            "best_step": self.best_step, "bad_validations": self.bad_validations,
            **self.step.resume_state(),
        }, keep=tc.keep_checkpoints)
        self._restore(resume_checkpoint, reset_training, init_from)
        self.checkpoints.write_sidecars(config, tokenizer)

    # -- properties ----------------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        return int(self.step.step.numpy())

    # -- setup ---------------------------------------------------------------------------------
    def _losses(self, batch: Batch, step, training: bool) -> Dict[str, tf.Tensor]:
        outputs = self.model(batch, training=training)
        outputs = {k: tf.cast(v, tf.float32) for k, v in outputs.items()}
        return compute_losses(outputs, batch, self.config.training, step,
                              self.config.model.reduction_factor)

    def _log_placement(self) -> None:
        model_vars = self.model.variables
        devices = sorted({v.value.device.rsplit("/", 1)[-1].replace("device:", "")
                          for v in [*model_vars, *self.optimizer.variables]})
        params = sum(int(np.prod(v.shape)) for v in self.model.weights)
        trainable = sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)
        logger.info("Model: %s parameters%s in %d variables; optimizer %s with %d variables "
                    "(slots built); all on %s", f"{params:,}",
                    f" ({trainable:,} trainable)" if trainable < params else "", len(model_vars),
                    type(self.optimizer).__name__, len(self.optimizer.variables),
                    ", ".join(devices))

    def _source_rows(self, init_from: Optional[str], resume_checkpoint: Optional[str],
                     reset: bool) -> Optional[SourceRows]:
        """The embedding rows that hold another run's weights: of `init_from` for a run that
        starts now, as recorded in model_info.json for one that resumes (None: no warm start)."""
        if not reset and (resume_checkpoint or tf.train.get_checkpoint_state(self.directory)):
            recorded = read_model_info(self.directory).get("init_from")
            return SourceRows(**recorded["source_rows"]) if recorded else None
        if not init_from:
            return None
        return SourceRows.of(locate_source(init_from))

    def _restore(self, resume_checkpoint: Optional[str], reset: bool,
                 init_from: Optional[str]) -> None:
        store = self.checkpoints
        if reset:
            if resume_checkpoint:
                raise MyXTTSError("--reset-training and --resume-from contradict each other: "
                                  "pass one of them.")
            store.archive("--reset-training")
            update_model_info(self.directory, steps_trained=0, best_val_loss=None,
                              init_from=None)
            if init_from:
                self._warm_start(init_from)
            else:
                logger.info("Starting from step 0 in %s.", self.directory)
            return
        if resume_checkpoint:
            latest = store.latest
            path = resolve_checkpoint_path(resume_checkpoint)
            step = store.restore(path)
            logger.info("Resumed from %s (--resume-from) at step %d.", path, step)
            if latest and os.path.abspath(latest) != os.path.abspath(path):
                # Training from `path` would write ckpt-N names the existing checkpoints use.
                store.archive(f"--resume-from {path}")
            return
        restored = store.restore_latest()
        if restored:
            logger.info("Resumed from %s at step %d (epoch %d). Pass --reset-training to start "
                        "over.", *restored, int(self.epoch.numpy()) + 1)
            if init_from:
                recorded = read_model_info(self.directory).get("init_from")
                logger.info("--init-from %s is not applied again: %s", init_from,
                            f"this run started from {recorded['checkpoint']}" if recorded else
                            "this directory holds a run of its own; pass a new "
                            "--checkpoint-dir to warm-start")
        elif init_from:
            self._warm_start(init_from)
        else:
            logger.info("No checkpoint in %s: starting from step 0.", self.directory)

    def _warm_start(self, init_from: str) -> None:
        """Copies the model weights of `init_from` into this run's model (step 0, fresh
        optimizer) and records where they came from in model_info.json."""
        source = locate_source(init_from)
        path = resolve_checkpoint(source.directory, source.checkpoint)
        # A passing copy, in host memory and float32 (variables are float32 in every policy).
        policy = keras.mixed_precision.global_policy()
        keras.mixed_precision.set_global_policy("float32")
        try:
            with tf.device("/CPU:0"):
                source_model = restore_model(source.directory, path, source.config,
                                             source.tokenizer)
        finally:
            keras.mixed_precision.set_global_policy(policy)
        grown = copy_source_weights(source_model, self.model)
        rows = SourceRows.of(source)
        symbols = self.tokenizer.symbols[rows.tokens:] if self.tokenizer else []
        languages = self.config.data.languages[rows.languages:]
        step = checkpoint_step(path)
        update_model_info(self.directory, init_from={
            "checkpoint": os.path.abspath(path), "step": step,
            "source_rows": dataclasses.asdict(rows), "added_symbols": symbols,
            "added_languages": languages})
        added = {"tokens": " ".join(repr(c) for c in symbols), "languages": ", ".join(languages)}
        new_rows = "; ".join(f"{name} {a}-{b - 1} ({added[name]})"
                             for name, (a, b) in grown.items())
        logger.info("Initialised from %s (step %d of that run): model weights only; fresh "
                    "optimizer, step 0, checkpoints in %s. %s", path, step, self.directory,
                    f"New embedding rows, set to the mean of the source rows: {new_rows}."
                    if new_rows else "No embedding rows added.")

    # -- training ------------------------------------------------------------------------------
    def fit(self, pipeline) -> FitSummary:
        """Trains until training.max_steps, training.epochs, early stopping or a signal.

        `pipeline` is a myxtts.data.pipeline.InputPipeline: `train_batches(epoch, model_device,
        skip_batches=...)` and `val_batches(model_device)` give DeviceFeeders of batches that
        are already on the model device.
        """
        tc = self.config.training
        start_step = self.global_step
        if tc.max_steps and start_step >= tc.max_steps:
            logger.info("Already at step %d >= --max-steps %d: nothing to train.", start_step,
                        tc.max_steps)
            return FitSummary(start_step, int(self.epoch.numpy()), "max_steps",
                              self.checkpoints.latest, self._best_or_none())
        monitor = TrainingMonitor(os.path.join(self.directory, "tensorboard"),
                                  tc.max_steps or None, start_step, self.config.data.sample_rate)
        previous_handlers = self._install_signal_handlers()
        try:
            return self._fit(pipeline, monitor)
        finally:
            self._restore_signal_handlers(previous_handlers)
            monitor.close()

    def _fit(self, pipeline, monitor: TrainingMonitor) -> FitSummary:
        tc = self.config.training
        throughput = Throughput()
        self._last_save = time.monotonic()
        first_loss = last_loss = None
        reason = None
        start_delay = tc.model_start_delay
        feeder = upcoming = None
        try:
            while reason is None:
                epoch = int(self.epoch.numpy())
                if epoch >= tc.epochs:
                    reason = "epochs"
                    break
                if upcoming is not None:
                    feeder, upcoming = upcoming, None
                else:
                    skip = int(self.batch_in_epoch.numpy())
                    if skip:
                        logger.info("Epoch %d: skipping the %d batches trained before the "
                                    "restart.", epoch + 1, skip)
                    feeder = pipeline.train_batches(epoch, self.model_device, skip_batches=skip)
                if start_delay > 0:
                    self._wait_for_data(feeder, start_delay)
                    start_delay = 0.0
                for batch, waited in _timed(feeder):
                    started = time.monotonic()
                    out = self._run_step(batch)
                    throughput.add(waited, time.monotonic() - started, int(out["frames"]))
                    self.batch_in_epoch.assign_add(1)
                    last_loss = float(out["total"])
                    first_loss = last_loss if first_loss is None else first_loss
                    monitor.progress(last_loss, throughput)
                    if upcoming is None and feeder.exhausted and epoch + 1 < tc.epochs:
                        # The data device has read this epoch's last batch: it starts on the
                        # next epoch now, so the model device does not wait at the boundary.
                        upcoming = pipeline.train_batches(epoch + 1, self.model_device)
                    if out["updated"]:
                        if int(out["consecutive_nonfinite"]) >= tc.max_nonfinite_steps:
                            self._raise_nonfinite()
                        reason = self._after_update(monitor, throughput, pipeline)
                        if reason:
                            break
                else:
                    self.epoch.assign_add(1)
                    self.batch_in_epoch.assign(0)
                feeder.close()
        finally:
            for open_feeder in (feeder, upcoming):
                if open_feeder is not None:
                    open_feeder.close()
        path = self._save()
        logger.info("Training stopped at step %d (%s). Checkpoint: %s", self.global_step,
                    reason, path or self.checkpoints.latest)
        return FitSummary(self.global_step, int(self.epoch.numpy()), reason,
                          path or self.checkpoints.latest, self._best_or_none(), first_loss,
                          last_loss)

    @staticmethod
    def _wait_for_data(feeder, seconds: float) -> None:
        """--model-start-delay: let the data device fill the queue of featurized batches
        (waiting at most `seconds`), so the first steps do not wait for data."""
        started = time.monotonic()
        fill = feeder.wait_until_filled(seconds)
        logger.info("Model start delay: the data device filled %.0f%% of the feeder queue "
                    "(%d/%d featurized batches on the model device) in %.1f s (limit %.1f s).",
                    100 * fill, feeder.queued, feeder.capacity, time.monotonic() - started,
                    seconds)

    def _run_step(self, batch: Batch) -> Dict[str, np.ndarray]:
        try:
            out = self.step(batch)
            frames = tf.reduce_sum(batch["mel_lengths"])
            return {k: v.numpy() for k, v in out.items()} | {"frames": frames.numpy()}
        except tf.errors.ResourceExhaustedError as e:
            raise TrainingStopped(self._oom_message(e)) from None

    def _after_update(self, monitor: TrainingMonitor, throughput: Throughput,
                      pipeline) -> Optional[str]:
        """Logging, validation, checkpoints and stop conditions after an optimizer update.
        Returns a stop reason, or None to go on."""
        tc = self.config.training
        step = self.global_step
        if step % tc.log_every_steps == 0:
            self._log(monitor, throughput, step)
        if self._stop_signal is not None:
            return f"signal {signal.Signals(self._stop_signal).name}"
        if pipeline.val_steps and step % tc.validate_every_steps == 0:
            stop = self.validate(pipeline, monitor)
            throughput.reset()  # the window's frames/s should not include validation time
            if stop:
                return "early_stopping"
        if tc.max_steps and step >= tc.max_steps:
            return "max_steps"
        if (step % tc.checkpoint_every_steps == 0
                or (time.monotonic() - self._last_save) / 60.0 >= tc.checkpoint_every_minutes):
            self._save()
        return None

    def _log(self, monitor: TrainingMonitor, throughput: Throughput, step: int) -> None:
        scalars = {f"loss/{k}": v for k, v in self.step.metric_results().items()
                   if k != "grad_norm"}
        scalars.update(grad_norm=self.step.metric_results()["grad_norm"],
                       learning_rate=self.step.learning_rate(),
                       loss_scale=self.step.loss_scale(),
                       frames_per_second=throughput.frames_per_second,
                       data_wait_fraction=throughput.data_wait_fraction,
                       nonfinite_steps=float(self.step.nonfinite_total.numpy()))
        monitor.log_train(step, int(self.epoch.numpy()), scalars)
        self.step.reset_metrics()
        throughput.reset()

    # -- validation ----------------------------------------------------------------------------
    def _val_batch(self, batch: Batch):
        """Teacher-forced validation losses of one batch (compiled, on the model device);
        returns the first item's postnet mel and every item's alignment."""
        with tf.device(self.model_device):
            return self._val_compiled(batch)

    def _val_step(self, batch: Batch):
        with tf.device(self.model_device):
            outputs = self.model(batch, training=False)
            outputs = {k: tf.cast(v, tf.float32) for k, v in outputs.items()}
            losses = compute_losses(outputs, batch, self.config.training, self.step.step,
                                    self.config.model.reduction_factor)
            weight = tf.cast(tf.shape(batch["mel"])[0], tf.float32)
            for name, metric in self.val_metrics.items():
                metric.update_state(losses[name], sample_weight=weight)
            return outputs["mel_after"][0], outputs["alignments"]

    def validate(self, pipeline, monitor: Optional[TrainingMonitor] = None) -> bool:
        """Teacher-forced losses over the validation batches and one free-running decode;
        keeps best/ and model_info.json up to date. Returns True when early stopping triggers."""
        tc = self.config.training
        for metric in self.val_metrics.values():
            metric.reset_state()
        first = None
        teacher_forced = []
        with pipeline.val_batches(self.model_device) as feeder:
            for batch in feeder:
                mel_after, alignments = self._val_batch(batch)
                teacher_forced += self._alignment_measures(batch, alignments.numpy(),
                                                           batch["mel_lengths"].numpy())
                if first is None:
                    first = (batch, mel_after, alignments[0])
        if first is None:
            logger.warning("The validation set gave no batches; validation skipped.")
            return False
        scalars = {f"loss/{k}": float(m.result()) for k, m in self.val_metrics.items()}
        generated = self._free_running(first[0])
        scalars.update(_mean_measures("teacher_forced", teacher_forced))
        scalars.update(_mean_measures("free_running", generated["measures"]))
        scalars["free_running/ended_by_stop"] = generated["ended_by_stop"]
        scalars["free_running/length_ratio"] = generated["length_ratio"]
        # The step-independent objective (no guided-attention term, whose weight decays with
        # the step) ranks checkpoints and drives early stopping.
        val_loss = scalars["loss/objective"]
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
            images, audio = self._examples(*first, generated)
            monitor.log_validation(step, scalars, images, audio, improved)
        update_model_info(self.directory, steps_trained=step,
                          best_val_loss=self._best_or_none(), best_step=int(self.best_step.numpy()),
                          last_val_loss=val_loss)
        patience = tc.early_stopping_patience
        if patience and int(self.bad_validations.numpy()) >= patience:
            logger.warning("Early stopping (overtraining): the validation loss has not improved "
                           "for %d validations (%d steps; training.early_stopping_patience), so "
                           "the model is learning the training utterances rather than the voice. "
                           "The best model, validation loss %.4f at step %d, is %s: synthesize "
                           "or export it with --checkpoint best.", patience,
                           patience * tc.validate_every_steps, float(self.best_val_loss.numpy()),
                           int(self.best_step.numpy()), self.checkpoints.best)
            return True
        return False

    def _alignment_measures(self, batch: Batch, alignments: np.ndarray,
                            mel_lengths: np.ndarray) -> List[Dict[str, float]]:
        """Focus, monotonicity and coverage of each item's alignment [steps, tokens] over its
        valid decoder steps (from `mel_lengths`) and tokens."""
        r = self.config.model.reduction_factor
        tokens = batch["token_lengths"].numpy()
        return [alignment_measures(alignments[i, : max(1, -(-int(n) // r)), : int(t)])
                for i, (n, t) in enumerate(zip(mel_lengths, tokens))]

    def _free_running(self, batch: Batch, items: int = 4) -> Dict:
        """Free-running decodes of the batch's first `items` items with references from the
        batch: alignment measures, the share ended by the stop head (not the length cap) and
        the mean generated/target length ratio."""
        k = min(items, int(batch["tokens"].shape[0]))
        with tf.device(self.model_device):
            latents = self.model.speaker_latents(batch["ref_mel"][:k], batch["ref_lengths"][:k])
            out = self.model.generate(batch["tokens"][:k], batch["token_lengths"][:k],
                                      batch["language_ids"][:k], latents)
        lengths = np.maximum(out["mel_lengths"].numpy(), 1)
        target = batch["mel_lengths"][:k].numpy()
        return {"out": out,
                "measures": self._alignment_measures(batch, out["alignments"].numpy(), lengths),
                "ended_by_stop": float(np.mean(out["stopped"].numpy())),
                "length_ratio": float(np.mean(lengths / np.maximum(target, 1)))}

    def _examples(self, batch: Batch, mel_after, alignment, generated):
        """Images and Griffin-Lim audio of the first validation item, teacher-forced and
        free-running."""
        n = int(batch["mel_lengths"][0])
        t = int(batch["token_lengths"][0])
        r = self.config.model.reduction_factor
        out = generated["out"]
        g = max(int(out["mel_lengths"][0]), 1)
        target = batch["mel"][0, :n].numpy()
        free_mel = out["mel"][0, :g].numpy()
        images = {"mel/target": target.T, "mel/teacher_forced": mel_after[:n].numpy().T,
                  "mel/free_running": free_mel.T,
                  "alignment/teacher_forced": alignment[: -(-n // r), :t].numpy().T,
                  "alignment/free_running": out["alignments"][0, : -(-g // r), :t].numpy().T}
        if self._griffin_lim is None:
            self._griffin_lim = GriffinLim.from_config(self.config.data)
        audio = {"audio/target_griffin_lim": self._griffin_lim(target).numpy(),
                 "audio/free_running_griffin_lim": self._griffin_lim(free_mel).numpy()}
        return images, audio

    # -- checkpoints, stopping -----------------------------------------------------------------
    def _save(self) -> Optional[str]:
        path = self.checkpoints.save(self.global_step)
        self._last_save = time.monotonic()
        update_model_info(self.directory, steps_trained=self.global_step,
                          best_val_loss=self._best_or_none(),
                          precision=self.precision.policy)
        return path

    def _best_or_none(self) -> Optional[float]:
        best = float(self.best_val_loss.numpy())
        return None if math.isinf(best) else best

    def _raise_nonfinite(self) -> None:
        tc = self.config.training
        raise TrainingStopped(
            f"Training stopped: {tc.max_nonfinite_steps} consecutive optimizer steps had "
            f"non-finite (NaN/Inf) gradients at step {self.global_step}, so they were skipped "
            f"and no checkpoint was written; the last good checkpoint "
            f"({self.checkpoints.latest or 'none yet'}) is intact. Try a lower learning rate "
            f"(--lr, now {tc.learning_rate:g}) or longer warmup (training.warmup_steps), "
            f"--precision fp32 or mixed_bfloat16 instead of {self.precision.policy}, a lower "
            f"training.clip_norm, and check the data with --validate-only.")

    def _oom_message(self, error: Exception) -> str:
        d, tc = self.config.data, self.config.training
        return (f"Out of memory on {self.model_device} at step {self.global_step} "
                f"({str(error).splitlines()[0][:200]}). Lower, in this order: --batch-size "
                f"(now {d.batch_size}; with --grad-accum {tc.grad_accum_steps * 2} to keep the "
                f"effective batch), data.max_audio_seconds (now {d.max_audio_seconds:g} s: the "
                f"longest bucket sets peak memory), data.bucket_boundaries/num_buckets (now "
                f"{d.num_buckets}), --buffer-size (now {d.buffer_size} batches prefetched on the "
                f"data device); or use --precision mixed_bfloat16/mixed_float16 and "
                f"model.gradient_checkpointing: true. The last good checkpoint "
                f"({self.checkpoints.latest or 'none yet'}) is intact.")

    def _install_signal_handlers(self):
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}

        def handler(signum, _frame):
            logger.warning("%s received: saving a checkpoint after the current step, then "
                           "exiting (send it again to exit immediately).",
                           signal.Signals(signum).name)
            self._stop_signal = signum
            for sig, old in previous.items():
                signal.signal(sig, old)

        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
        return previous

    @staticmethod
    def _restore_signal_handlers(previous) -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
