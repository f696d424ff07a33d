"""The run machinery both trainers share (XTTSTrainer, the acoustic model; VocoderTrainer, the
HiFi-GAN vocoder): precision plan and seed, run counters on the model device, restoring
(automatic resume, --resume-from, --reset-training), the training loop over DeviceFeeders
(epochs, position in the epoch, next epoch started early, --model-start-delay), logging,
validation, best-by-validation with early stopping, checkpoints and SIGINT/SIGTERM.

A trainer subclasses Trainer: it calls `_start_run` first, creates its models and optimizers
and `_create_run_counters()` inside `self._model_scope()` (`tf.device(self.model_device)`, or the
strategy's scope when a myxtts.training.distribution.Distribution is given), opens `self.checkpoints`
with `run_counters()` among its objects and calls `_restore`. The hooks the loop calls are
Trainer's abstract methods: a subclass that misses one cannot be created.

Several workers (MultiWorkerMirroredStrategy): every worker runs the same loop, so their
collective operations stay in step; only the chief writes into training.checkpoint_dir
(`run_directory`). The others write their checkpoints, TensorBoard events and model_info.json
into a temporary `directory` that is removed when the process exits, and restore from the
chief's checkpoints: a job whose workers are restarted resumes from the chief's last checkpoint
(the backup-and-restore semantics of tf.keras' BackupAndRestore, built on CheckpointStore).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import math
import os
import signal
import threading
import time
from typing import Dict, Iterable, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from myxtts.errors import MyXTTSError
from myxtts.model_info import read_model_info, update_model_info
from myxtts.run_directory import TENSORBOARD_DIR
from myxtts.training.checkpoints import resolve_checkpoint_path
from myxtts.training.monitoring import Throughput, TrainingMonitor
from myxtts.training.precision import apply_precision, resolve_precision
from myxtts.training.schedules import ScheduleClock

logger = logging.getLogger("myxtts.training")

Batch = Dict[str, tf.Tensor]


LR_CLOCK_MULTI_WORKER = (
    "training.lr_clock is set, but this run trains on several workers (TF_CONFIG): each "
    "machine keeps its own clock, so their learning rates, and with them the replicas' "
    "weights, would drift apart. End a multi-worker run by --max-steps, or set "
    "training.lr_clock: false.")


class TrainingStopped(MyXTTSError, RuntimeError):
    """Training cannot go on (non-finite loss streak, out of memory); the message says why and
    what to change. The last good checkpoint is untouched."""


@dataclasses.dataclass
class FitSummary:
    """How a `fit` call ended."""

    step: int
    epoch: int
    reason: str  # "max_steps" | "max_minutes" | "epochs" | "early_stopping" | "signal SIGTERM"
    checkpoint: Optional[str]
    best_val_loss: Optional[float]  # the best validation score (lower is better)
    first_loss: Optional[float] = None
    last_loss: Optional[float] = None
    best: Optional[str] = None  # the best checkpoint's step and measures, in words
    nothing_trained: bool = False  # the run already stood at its max_steps / max_minutes


def _timed(batches: Iterable[Batch]):
    """Yields (batch, seconds the caller waited for it)."""
    iterator = iter(batches)
    while True:
        started = time.monotonic()
        batch = next(iterator, None)
        if batch is None:
            return
        yield batch, time.monotonic() - started


def _float_or_none(value) -> Optional[float]:
    return None if value is None else float(value)


def install_stop_handlers(on_signal) -> Dict[int, object]:
    """Routes SIGINT and SIGTERM to `on_signal(signum)` once (finish the step, save, stop; a
    second signal gets the previous handler and exits at once); returns the previous handlers
    for `restore_handlers` (nothing is installed outside the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}

    def handler(signum, _frame):
        logger.warning("%s received: saving a checkpoint after the current step, then "
                       "exiting (send it again to exit immediately).",
                       signal.Signals(signum).name)
        on_signal(signum)
        for sig, old in previous.items():
            signal.signal(sig, old)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, handler)
    return previous


def restore_handlers(previous: Dict[int, object]) -> None:
    for sig, old in previous.items():
        signal.signal(sig, old)


def default_device() -> str:
    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


class Trainer(abc.ABC):
    """Shared by XTTSTrainer and VocoderTrainer (see the module docstring)."""

    # -- the hooks a trainer provides ----------------------------------------------------------
    @property
    @abc.abstractmethod
    def global_step(self) -> int:
        """The optimizer updates done so far."""

    @abc.abstractmethod
    def _run_step(self, batch: Batch) -> Dict[str, tf.Tensor]:
        """One micro-batch: returns the losses ("total" among them) as tensors, and counts
        `batch_in_epoch` and `frames` on the device."""

    @abc.abstractmethod
    def _micro_batches_done(self) -> int:
        """Micro-batches run since the run began (gradient accumulation counts each)."""

    @abc.abstractmethod
    def _updates_after(self, micro: int) -> bool:
        """Whether the `micro`-th micro-batch ended with an optimizer update."""

    @abc.abstractmethod
    def _log(self, monitor: TrainingMonitor, throughput: Throughput, step: int) -> None:
        """Writes the step line and the TensorBoard scalars."""

    @abc.abstractmethod
    def _has_validation(self, pipeline) -> bool:
        """Whether the pipeline holds validation data."""

    @abc.abstractmethod
    def validate(self, pipeline, monitor: Optional[TrainingMonitor] = None) -> bool:
        """Validates, records the figures and ends with `_after_validation`; True asks the loop
        to stop early."""

    @abc.abstractmethod
    def _stop_if_nonfinite(self) -> None:
        """Raises TrainingStopped after a streak of non-finite losses."""

    @abc.abstractmethod
    def _oom_message(self, error: Exception) -> str:
        """What to change when the model device runs out of memory."""

    # -- setup ---------------------------------------------------------------------------------
    def _start_run(self, config, model_device: Optional[str], distribution=None) -> None:
        tc = config.training
        if tc.lr_clock and distribution is not None and distribution.num_workers > 1:
            raise MyXTTSError(LR_CLOCK_MULTI_WORKER)
        self.config = config
        self.distribution = distribution
        if distribution is not None:
            model_device = distribution.primary_device
        self.model_device = model_device or default_device()
        # Where the run lives (read by every worker) and where this process writes (the same
        # except on a worker that is not the chief: a temporary directory).
        self.run_directory = tc.checkpoint_dir
        self.directory = (distribution.writable_directory(tc.checkpoint_dir) if distribution
                          else tc.checkpoint_dir)
        # training.lr_clock: the subclass creates it with its optimizer and checkpoints it; it
        # advances after every update.
        self.schedule_clock: Optional[ScheduleClock] = None
        self._fit_started: Optional[float] = None  # time.monotonic() at the start of fit
        self._stop_signal: Optional[int] = None
        self._last_save = time.monotonic()
        self.precision = resolve_precision(tc.precision, self.model_device, tc.tf32)
        apply_precision(self.precision)
        keras.utils.set_random_seed(tc.seed)

    def _model_scope(self):
        """Where everything the model owns is created: the model device, or every model
        device of the strategy (MirroredVariables)."""
        if self.distribution is not None:
            return self.distribution.scope()
        return tf.device(self.model_device)

    @property
    def _batch_target(self):
        """What the pipeline's feeders hand batches to: the model device, or the strategy."""
        return self.distribution or self.model_device

    @property
    def _replica_devices(self):
        """This machine's model devices ("/GPU:1", ...)."""
        if self.distribution is not None:
            return list(self.distribution.plan.model_devices)
        return [self.model_device]

    def _memory_devices(self, pipeline):
        """The devices whose memory the log lines report: the pipeline's data device (the
        pipelines of myxtts.data have one) and this machine's model devices."""
        data_device = getattr(pipeline, "data_device", None)
        return ([data_device] if data_device else []) + self._replica_devices

    def _create_run_counters(self) -> None:
        """Call inside self._model_scope()."""
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        # Batches of the current epoch already trained on (the data position).
        self.batch_in_epoch = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name="batch_in_epoch")
        # The best validation score so far, lower is better (`_selection_score`: the
        # validation loss, or for XTTSTrainer under training.select_by text_match minus the
        # text-match share); checkpointed under its first name, so older runs resume.
        self.best_val_loss = tf.Variable(math.inf, dtype=tf.float32, trainable=False,
                                         name="best_val_loss")
        self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
        self.bad_validations = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="bad_validations")
        # Minutes of training in this run, as of the last save (training.max_minutes and
        # training.lr_clock count them across resumes).
        self.minutes_trained = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                           name="minutes_trained")
        # True (unpadded) frames trained on, for frames/s (not checkpointed).
        self.frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="frames")

    def run_counters(self) -> Dict[str, tf.Variable]:
        """The counters a checkpoint holds besides models, optimizers and the step."""
        return {"epoch": self.epoch, "batch_in_epoch": self.batch_in_epoch,
                "best_val_loss": self.best_val_loss, "best_step": self.best_step,
                "bad_validations": self.bad_validations, "minutes_trained": self.minutes_trained}

    def _minutes(self) -> float:
        """Minutes trained in this run: the checkpoint's and this fit's (outside a fit, what the
        run counted last)."""
        if self._fit_started is None:
            return float(self.minutes_trained.numpy())
        return self._minutes_before + (time.monotonic() - self._fit_started) / 60.0

    def _restore(self, resume_checkpoint: Optional[str], reset: bool) -> bool:
        """Restores --resume-from, else the newest intact checkpoint of the run; True when a
        checkpoint was restored (False: the run starts at step 0)."""
        store = self.checkpoints
        if self.directory != self.run_directory:
            return self._restore_from_chief(resume_checkpoint, reset)
        if reset:
            if resume_checkpoint:
                raise MyXTTSError("--reset-training and --resume-from contradict each other: "
                                  "pass one of them.")
            store.archive("--reset-training")
            update_model_info(self.directory, steps_trained=0, best_val_loss=None,
                              best_measures=None)
            logger.info("Starting from step 0 in %s.", self.directory)
            return False
        if resume_checkpoint:
            latest = store.latest
            path = resolve_checkpoint_path(resume_checkpoint)
            step = store.restore(path)
            logger.info("Resumed from %s (--resume-from) at step %d.", path, step)
            if latest and os.path.abspath(latest) != os.path.abspath(path):
                # Training from `path` would write ckpt-N names the existing checkpoints use.
                store.archive(f"--resume-from {path}")
            return True
        restored = store.restore_latest()
        if restored:
            logger.info("Resumed from %s at step %d (epoch %d). Pass --reset-training to start "
                        "over.", *restored, int(self.epoch.numpy()) + 1)
            return True
        logger.info("No checkpoint in %s: starting from step 0.", self.directory)
        return False

    def _restore_from_chief(self, resume_checkpoint: Optional[str], reset: bool) -> bool:
        """A worker that is not the chief restores what the chief restores (--resume-from, or
        the newest intact checkpoint in the run directory) and changes nothing there: archiving
        and setting damaged checkpoints aside are the chief's."""
        if reset:
            return False
        if resume_checkpoint:
            path = resolve_checkpoint_path(resume_checkpoint)
        else:
            restored = self.checkpoints.restore_latest_of(self.run_directory)
            if restored:
                logger.info("Resumed from the chief's %s at step %d.", *restored)
            return restored is not None
        step = self.checkpoints.restore(path)
        logger.info("Resumed from %s (--resume-from) at step %d.", path, step)
        return True

    # -- training ------------------------------------------------------------------------------
    def fit(self, pipeline) -> FitSummary:
        """Trains until training.max_steps, training.max_minutes, training.epochs, early
        stopping or a signal.

        `pipeline.train_batches(epoch, model_device, skip_batches=...)` gives DeviceFeeders of
        batches that are already on the model device (myxtts.data.pipeline.InputPipeline,
        myxtts.data.segments.SegmentPipeline).
        """
        tc = self.config.training
        start_step = self.global_step
        if tc.max_steps and start_step >= tc.max_steps:
            logger.info("Already at step %d >= --max-steps %d: nothing to train.", start_step,
                        tc.max_steps)
            return FitSummary(start_step, int(self.epoch.numpy()), "max_steps",
                              self.checkpoints.latest, self._best_or_none(),
                              best=self._best_description(), nothing_trained=True)
        self._minutes_before = float(self.minutes_trained.numpy())
        if tc.max_minutes and self._minutes_before >= tc.max_minutes:
            logger.info("Already trained %.1f minutes >= training.max_minutes %g: nothing to "
                        "train (raise max_minutes to train on).", self._minutes_before,
                        tc.max_minutes)
            return FitSummary(start_step, int(self.epoch.numpy()), "max_minutes",
                              self.checkpoints.latest, self._best_or_none(),
                              best=self._best_description(), nothing_trained=True)
        end_step, ends_by = self._end_step(pipeline, start_step)
        monitor = TrainingMonitor(os.path.join(self.directory, TENSORBOARD_DIR),
                                  end_step, start_step, self.config.data.sample_rate,
                                  memory_devices=self._memory_devices(pipeline),
                                  minutes_left=(tc.max_minutes - self._minutes_before
                                                if tc.max_minutes else None), ends_by=ends_by)
        self._stop_signal = None
        self._fit_started = time.monotonic()
        if self.schedule_clock is not None:
            logger.info("The learning-rate schedule keeps pace with the clock "
                        "(training.lr_clock): it stands at step %.0f of %.0f, with %.1f of %g "
                        "minutes trained.", max(self.schedule_clock.start(), start_step),
                        self.schedule_clock.end_step, self._minutes_before, tc.max_minutes)
        previous_handlers = install_stop_handlers(self._on_stop_signal)
        try:
            return self._fit(pipeline, monitor)
        finally:
            self._fit_started = None
            restore_handlers(previous_handlers)
            monitor.close()

    def _end_step(self, pipeline, start_step: int) -> Tuple[Optional[int], str]:
        """(the step training ends at, what ends it): training.max_steps, or the last epoch's
        last update when the pipeline counts its batches and that comes first; (None, "") when
        neither is known."""
        tc = self.config.training
        ends = [(tc.max_steps, "max_steps")] if tc.max_steps else []
        per_epoch = getattr(pipeline, "train_steps_per_epoch", None)
        if per_epoch:
            batches_left = ((tc.epochs - int(self.epoch.numpy())) * per_epoch
                            - int(self.batch_in_epoch.numpy()))
            updates_left = -(-max(0, batches_left) // tc.grad_accum_steps)
            ends.append((start_step + updates_left, f"epoch {tc.epochs}"))
        return min(ends) if ends else (None, "")

    def _on_stop_signal(self, signum: int) -> None:
        self._stop_signal = signum

    def _fit(self, pipeline, monitor: TrainingMonitor) -> FitSummary:
        """The loop reads nothing back from the model device between log points: the step and
        micro-step counts are mirrored on the host (`step`, `micro`), the data position, frames
        and losses are counted on the device, and the non-finite stop flag is looked at with
        them (`_log`, `validate`, `_save`), so the next step is queued while the last one runs."""
        tc = self.config.training
        throughput = Throughput(self.frames)
        self._last_save = time.monotonic()
        step = self.global_step
        micro = self._micro_batches_done()
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
                if first_loss is None:
                    logger.info("Waiting for the first batch (the input pipeline reads, "
                                "featurizes and prefetches it) ...")
                if upcoming is not None:
                    feeder, upcoming = upcoming, None
                else:
                    skip = int(self.batch_in_epoch.numpy())
                    if skip:
                        logger.info("Epoch %d: skipping the %d batches trained before the "
                                    "restart.", epoch + 1, skip)
                    feeder = pipeline.train_batches(epoch, self._batch_target,
                                                    skip_batches=skip)
                if start_delay > 0:
                    self._wait_for_data(feeder, start_delay)
                    start_delay = 0.0
                for batch, waited in _timed(feeder):
                    throughput.add_wait(waited)
                    if first_loss is None:
                        logger.info("First batch after %.1f s; tracing%s the training step "
                                    "(the first step takes longest) ...",
                                    time.monotonic() - self._fit_started,
                                    " and XLA-compiling" if tc.xla else "")
                        compiling = time.monotonic()
                    try:
                        last_loss = self._run_step(batch)["total"]
                    except tf.errors.ResourceExhaustedError as e:
                        raise TrainingStopped(self._oom_message(e)) from None
                    if first_loss is None:
                        first_loss = last_loss
                        float(first_loss)  # waits once, for the message to time the compile
                        logger.info("The training step is ready (%.1f s); training from step "
                                    "%d%s.", time.monotonic() - compiling, step,
                                    f" to step {monitor.total_steps} ({monitor.ends_by})"
                                    if monitor.total_steps else "")
                    if upcoming is None and feeder.exhausted and epoch + 1 < tc.epochs:
                        # The data device has read this epoch's last batch: it starts on the
                        # next epoch now, so the model device does not wait at the boundary.
                        upcoming = pipeline.train_batches(epoch + 1, self._batch_target)
                    micro += 1
                    if self._updates_after(micro):
                        step += 1
                        monitor.progress()
                        reason = self._after_update(step, monitor, throughput, pipeline)
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
                          path or self.checkpoints.latest, self._best_or_none(),
                          _float_or_none(first_loss), _float_or_none(last_loss),
                          self._best_description())

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

    def _after_update(self, step: int, monitor: TrainingMonitor, throughput: Throughput,
                      pipeline) -> Optional[str]:
        """Logging, validation, checkpoints and stop conditions after optimizer update `step`.
        Returns a stop reason, or None to go on."""
        tc = self.config.training
        if self.schedule_clock is not None:
            self.schedule_clock.advance(step, self._minutes())
        if step % tc.log_every_steps == 0:
            self._log(monitor, throughput, step)
            throughput.reset()
        if self._stop_signal is not None:
            return f"signal {signal.Signals(self._stop_signal).name}"
        if self._has_validation(pipeline) and step % tc.validate_every_steps == 0:
            stop = self.validate(pipeline, monitor)
            throughput.reset()  # the window's frames/s should not include validation time
            if stop:
                return "early_stopping"
        if tc.max_steps and step >= tc.max_steps:
            return "max_steps"
        if tc.max_minutes and self._minutes() >= tc.max_minutes:
            return "max_minutes"
        if (step % tc.checkpoint_every_steps == 0
                or (time.monotonic() - self._last_save) / 60.0 >= tc.checkpoint_every_minutes):
            self._save()
        return None

    # -- validation ----------------------------------------------------------------------------
    # What the validation score is, for messages; XTTSTrainer names its training.select_by.
    SCORE_NAME = "validation loss"

    def _record_validation(self, score: float, loss: float,
                           measures: Sequence[Tuple[str, float]] = ()) -> bool:
        """Updates best/ (True when `score`, lower is better, is the best so far) and the
        early-stopping count; model_info.json keeps the best checkpoint's validation `loss`
        and `measures` (name, value pairs, the ranking measure first)."""
        improved = score < float(self.best_val_loss.numpy())
        if improved:
            self.best_val_loss.assign(score)
            self.best_step.assign(self.global_step)
            self.bad_validations.assign(0)
            self.minutes_trained.assign(self._minutes())
            self.checkpoints.save_best(self.global_step)
            update_model_info(self.directory, best_val_loss=loss,
                              best_measures=[[k, v] for k, v in measures] or None)
        else:
            self.bad_validations.assign_add(1)
        return improved

    def _after_validation(self, loss: float) -> bool:
        """model_info.json; True when early stopping triggers."""
        update_model_info(self.directory, steps_trained=self.global_step,
                          best_step=int(self.best_step.numpy()), last_val_loss=loss)
        tc = self.config.training
        patience = tc.early_stopping_patience
        if patience and int(self.bad_validations.numpy()) >= patience:
            logger.warning("Early stopping (overtraining): the %s has not improved for %d "
                           "validations (%d steps; training.early_stopping_patience), so the "
                           "model is learning the training utterances rather than the voice. "
                           "The best model, %s, is %s: synthesize or export it with "
                           "--checkpoint best.", self.SCORE_NAME, patience,
                           patience * tc.validate_every_steps, self._best_description(),
                           self.checkpoints.best)
            return True
        return False

    def _best_description(self) -> Optional[str]:
        """"validation loss 0.7356 (step 2500)" from what model_info.json keeps of best/, or
        None before the first validation."""
        if self._best_or_none() is None:
            return None
        info = read_model_info(self.directory)
        measures = info.get("best_measures") or [[self.SCORE_NAME, info.get("best_val_loss")]]
        shown = ", ".join(f"{k} {v:.4f}" for k, v in measures if v is not None)
        return f"{shown or self.SCORE_NAME} (step {int(self.best_step.numpy())})"

    # -- checkpoints ---------------------------------------------------------------------------
    def _save(self) -> Optional[str]:
        self._stop_if_nonfinite()
        self.minutes_trained.assign(self._minutes())
        path = self.checkpoints.save(self.global_step)
        self._last_save = time.monotonic()
        update_model_info(self.directory, steps_trained=self.global_step,
                          precision=self.precision.policy)
        return path

    def _best_or_none(self) -> Optional[float]:
        best = float(self.best_val_loss.numpy())
        return None if math.isinf(best) else best

    @staticmethod
    def _placement(variables) -> str:
        """The devices holding `variables`, for the start-up log ("CPU:1"; every component of
        a MirroredVariable)."""
        return ", ".join(sorted({c.device.rsplit("/", 1)[-1].replace("device:", "")
                                 for v in variables
                                 for c in getattr(v.value, "values", (v.value,))}))

    @staticmethod
    def _parameters(model) -> str:
        return f"{sum(int(np.prod(w.shape)) for w in model.trainable_variables):,}"
