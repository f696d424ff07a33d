"""XTTSTrainer: trains XTTSModel on the model device from batches the data device prepared.

    trainer = XTTSTrainer(config, model_device=plan.model_device, tokenizer=tokenizer)
    summary = trainer.fit(pipeline)          # a myxtts.data.pipeline.InputPipeline

Everything the model owns is created inside `tf.device(model_device)`: weights, the BUILT
optimizer (slots, iteration counter, learning rate, loss-scale state), the step and epoch
counters, gradient accumulators and metrics. Each step is one `tf.function(jit_compile=
training.xla)` run under that device (myxtts.training.step). Checkpoints (myxtts.training.
checkpoints) resume automatically from the latest in training.checkpoint_dir; a new run can
start from another run's model weights instead (`init_from`, myxtts.training.warm_start).

With `distribution` (myxtts.training.distribution.Distribution, docs/distributed.md) the same
things are created in the strategy's scope, mirrored on every model device, and the step is
myxtts.training.mirrored_step.MirroredTrainStep; validation runs on the first model device.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Dict, List, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.errors import MyXTTSError
from myxtts.evaluation.metrics import (alignment_measures, character_errors, dtw_mcd_matrix,
                                       mel_cepstra, text_match, word_errors)
from myxtts.run_directory import listed_checkpoints
from myxtts.source_run import RESUME_CONFLICT, Source, locate_source
from myxtts.inference.checkpoint_loading import resolve_checkpoint, restore_model
from myxtts.inference.griffin_lim import GriffinLim
from myxtts.model_info import read_model_info, update_model_info
from myxtts.models.xtts import XTTSModel
from myxtts.training.base import Batch, Trainer, TrainingStopped
from myxtts.training.checkpoints import CheckpointStore, checkpoint_step
from myxtts.training.losses import compute_losses, loss_counts
from myxtts.training.mirrored_step import MirroredTrainStep
from myxtts.training.monitoring import Throughput, TrainingMonitor
from myxtts.training.optimization import build_optimizer, weight_averages
from myxtts.training.schedules import ScheduleClock
from myxtts.training.step import TrainStep
from myxtts.training.warm_start import SourceRows, copy_source_weights, training_plan

logger = logging.getLogger("myxtts.training")

# compute_losses' keys (myxtts/training/losses.py); "total" is the one differentiated.
LOSS_NAMES = ("total", "objective", "mel", "postnet", "stop", "guided_attention",
              "guided_attention_weight", "reading", "reading_output")


def _distinct_rows(batch: Batch) -> int:
    """How many leading rows of `batch` are its own utterances: the pipeline completes a
    bucket's last batch by repeating them (rows n.. repeat rows 0..n-1), and a sentence that
    stands twice would be matched against itself."""
    tokens, lengths = batch["tokens"].numpy(), batch["mel_lengths"].numpy()
    size = len(lengths)
    for n in range(1, size):
        rows = np.arange(n, size)
        if (np.array_equal(tokens[rows], tokens[rows % n])
                and np.array_equal(lengths[rows], lengths[rows % n])):
            return n
    return size


def _mean_measures(prefix: str, measures: List[Dict[str, float]]) -> Dict[str, float]:
    """{"<prefix>/focus": mean focus, ...} over items."""
    if not measures:
        return {}
    return {f"{prefix}/{k}": float(np.mean([m[k] for m in measures])) for k in measures[0]}


class XTTSTrainer(Trainer):
    """Builds model, optimizer and counters on `model_device`, restores the latest checkpoint
    (or `resume_checkpoint`), and trains with `fit`.

    `tokenizer` (myxtts.data.text.Tokenizer) gives the vocabulary size when `model` is None and
    is saved as vocab.json. `reset_training` archives earlier checkpoints and starts at step 0.
    `init_from` (a run directory, DIR/best or a checkpoint prefix, or the
    myxtts.source_run.Source train_main.py located from one) starts a run that has no
    checkpoint yet from that run's model weights: fresh optimizer, step 0; `config` must take
    its model fields from that run (myxtts.source_run.warm_start_config) and `tokenizer` must
    extend its vocabulary. `distribution` trains on a tf.distribute strategy's model devices
    (then `model_device` is its first one).
    """

    def __init__(self, config: XTTSConfig, model: Optional[keras.Model] = None,
                 resume_checkpoint: Optional[str] = None, model_device: Optional[str] = None,
                 *, tokenizer=None, reset_training: bool = False,
                 init_from: Union[str, Source, None] = None, distribution=None):
        if init_from and resume_checkpoint:
            raise MyXTTSError(RESUME_CONFLICT)
        # The source run is located once; a Source from train_main.py is used as it is.
        source = locate_source(init_from) if isinstance(init_from, str) else init_from
        self._start_run(config, model_device, distribution)
        self.tokenizer = tokenizer
        tc = config.training
        self._griffin_lim: Optional[GriffinLim] = None
        self.recognizer = self._validation_recognizer(config)

        with self._model_scope():
            if model is None:
                if tokenizer is None:
                    raise MyXTTSError("XTTSTrainer needs a tokenizer (for the vocabulary size) "
                                      "when no model is passed.")
                logger.info("Creating model on device: %s", ", ".join(self._replica_devices))
                model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                                  config.data.n_mels)
            self.model = model
            # Before the optimizer is built: frozen variables get no slots.
            update_scales = training_plan(
                model, tc.freeze, tc.pretrained_lr_scale,
                self._source_rows(source, resume_checkpoint, reset_training))
            self.schedule_clock = ScheduleClock(tc) if tc.lr_clock else None
            self.optimizer = build_optimizer(tc, model, self.precision.loss_scaling,
                                             self.schedule_clock)
            self._create_run_counters()  # batch_in_epoch counts micro-batches
        step_options = dict(loss_names=LOSS_NAMES, grad_accum_steps=tc.grad_accum_steps,
                            jit_compile=tc.xla, max_nonfinite_steps=tc.max_nonfinite_steps,
                            on_micro_batch=self._count_batch, update_scales=update_scales)
        if distribution is None:
            self.step = TrainStep(model, self.optimizer, self._losses,
                                  model_device=self.model_device, **step_options)
        else:
            heads = config.model.decoder_layers * config.model.num_heads  # text_attention's
            self.step = MirroredTrainStep(
                model, self.optimizer, self._losses, distribution=distribution,
                count_fn=lambda b: loss_counts(b, config.model.reduction_factor, heads),
                **step_options)
        with tf.device(self.model_device):
            self.val_metrics = {name: keras.metrics.Mean(name=f"val_{name}")
                                for name in LOSS_NAMES}
        self._val_compiled = tf.function(self._val_step, jit_compile=tc.xla)
        self._log_placement()

        self.checkpoints = CheckpointStore(self.directory, {
            "model": model, "optimizer": self.optimizer, "step": self.step.step,
            "nonfinite_total": self.step.nonfinite_total, **self.run_counters(),
            **self.step.resume_state(),
            **({"schedule_position": self.schedule_clock.position}
               if self.schedule_clock else {}),
        }, keep=tc.keep_checkpoints)
        self._restore(resume_checkpoint, reset_training, source)
        self.checkpoints.write_sidecars(config, tokenizer)

    # -- properties ----------------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        return int(self.step.step.numpy())

    # -- setup ---------------------------------------------------------------------------------
    def _losses(self, batch: Batch, step, training: bool,
                counts=None) -> Dict[str, tf.Tensor]:
        """The losses of `batch`; under a strategy (`counts`: the global batch's loss counts,
        summed over the replicas) this replica's share of the global batch's losses."""
        outputs = self.model(batch, training=training)
        outputs = {k: tf.cast(v, tf.float32) for k, v in outputs.items()}
        r = self.config.model.reduction_factor
        if counts is None:
            return compute_losses(outputs, batch, self.config.training, step, r)
        losses = compute_losses(outputs, batch, self.config.training, step, r, counts)
        # Every replica has the whole weight; the strategy sums the replicas' values.
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        losses["guided_attention_weight"] /= replicas
        return losses

    def _count_batch(self, batch: Batch) -> None:
        """Inside the compiled step: the data position and the frame count stay on the device."""
        self.batch_in_epoch.assign_add(1)
        self.frames.assign_add(tf.cast(tf.reduce_sum(batch["mel_lengths"]), tf.int64))

    def _log_placement(self) -> None:
        model_vars = self.model.variables
        params = sum(int(np.prod(v.shape)) for v in self.model.weights)
        trainable = sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)
        logger.info("Model: %s parameters%s in %d variables; optimizer %s with %d variables "
                    "(slots built); all %s %s", f"{params:,}",
                    f" ({trainable:,} trainable)" if trainable < params else "", len(model_vars),
                    type(self.optimizer).__name__, len(self.optimizer.variables),
                    "mirrored on" if self.distribution else "on",
                    self._placement([*model_vars, *self.optimizer.variables]))

    def _run_step(self, batch: Batch) -> Dict[str, tf.Tensor]:
        return self.step(batch)

    def _micro_batches_done(self) -> int:
        return int(self.step.micro_step.numpy())

    def _source_rows(self, source: Optional[Source], resume_checkpoint: Optional[str],
                     reset: bool) -> Optional[SourceRows]:
        """The embedding rows that hold another run's weights: of `source` for a run that
        starts now, as recorded in model_info.json for one that resumes (None: no warm start)."""
        if not reset and (resume_checkpoint or listed_checkpoints(self.run_directory)):
            recorded = read_model_info(self.run_directory).get("init_from")
            return SourceRows(**recorded["source_rows"]) if recorded else None
        return SourceRows.of(source) if source else None

    def _restore(self, resume_checkpoint: Optional[str], reset: bool,
                 source: Optional[Source] = None) -> bool:
        """The shared restore, then the source run's weights for a run that starts at step 0
        (a run that resumes keeps its own weights)."""
        if reset:
            update_model_info(self.directory, init_from=None)
        restored = super()._restore(resume_checkpoint, reset)
        if source and restored:
            recorded = read_model_info(self.run_directory).get("init_from")
            logger.info("--init-from %s is not applied again: %s", source.directory,
                        f"this run started from {recorded['checkpoint']}" if recorded else
                        "this directory holds a run of its own; pass a new "
                        "--checkpoint-dir to warm-start")
        elif source:
            self._warm_start(source)
        return restored

    def _warm_start(self, source: Source) -> None:
        """Copies the model weights of `source` into this run's model (step 0, fresh
        optimizer) and records where they came from in model_info.json."""
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


    def _updates_after(self, micro: int) -> bool:
        return self.step.updates_after(micro)

    @staticmethod
    def _has_validation(pipeline) -> bool:
        return bool(pipeline.val_steps)

    def _log(self, monitor: TrainingMonitor, throughput: Throughput, step: int) -> None:
        self._stop_if_nonfinite()
        scalars = {f"loss/{k}": v for k, v in self.step.metric_results().items()
                   if k != "grad_norm"}
        scalars.update(grad_norm=self.step.metric_results()["grad_norm"],
                       learning_rate=self.step.learning_rate(),
                       loss_scale=self.step.loss_scale(),
                       **throughput.figures(),
                       nonfinite_steps=float(self.step.nonfinite_total.numpy()))
        monitor.log_train(step, int(self.epoch.numpy()), scalars)
        self.step.reset_metrics()

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
        """Teacher-forced losses over the validation batches and free-running decodes of the
        first training.free_running_sentences; keeps best/ (by training.select_by) and
        model_info.json up to date. Returns True when early stopping triggers. With
        training.ema_momentum all of it sees (and best/ keeps) the weights' moving average."""
        self._stop_if_nonfinite()
        with self._averaged_weights():
            return self._validate(pipeline, monitor)

    @contextlib.contextmanager
    def _averaged_weights(self):
        """training.ema_momentum: inside, every trained variable holds its moving average;
        after, its trained value again (also when validation raises)."""
        pairs = weight_averages(self.optimizer)
        if not pairs:
            yield
            return
        with self._model_scope():
            trained = [tf.identity(variable) for variable, _ in pairs]
            for variable, average in pairs:
                variable.assign(average)
        try:
            yield
        finally:
            with self._model_scope():
                for (variable, _), value in zip(pairs, trained):
                    variable.assign(value)

    def _validate(self, pipeline, monitor: Optional[TrainingMonitor]) -> bool:
        for metric in self.val_metrics.values():
            metric.reset_state()
        first = None
        teacher_forced = []
        generated = []
        wanted = self.config.training.free_running_sentences
        with pipeline.val_batches(self.model_device) as feeder:
            for batch in feeder:
                mel_after, alignments = self._val_batch(batch)
                teacher_forced += self._alignment_measures(batch, alignments.numpy(),
                                                           batch["mel_lengths"].numpy())
                if first is None:
                    first = (batch, mel_after, alignments[0])
                missing = wanted - sum(len(g["lengths"]) for g in generated)
                if missing > 0:
                    generated.append(self._free_running(batch, missing))
        if first is None:
            logger.warning("The validation set gave no batches; validation skipped.")
            return False
        scalars = {f"loss/{k}": float(m.result()) for k, m in self.val_metrics.items()}
        scalars.update(_mean_measures("teacher_forced", teacher_forced))
        scalars.update(self._free_running_figures(generated))
        score, measures = self._selection_score(scalars)
        improved = self._record_validation(score, scalars["loss/objective"], measures)
        if monitor is not None:
            images, audio = self._examples(*first, generated[0])
            monitor.log_validation(self.global_step, scalars, images, audio, improved)
        return self._after_validation(scalars["loss/objective"])

    @property
    def SCORE_NAME(self) -> str:  # pylint: disable=invalid-name
        return {"text_match": "text-match", "wer": "free-running WER"}.get(
            self.config.training.select_by, "validation loss")

    @staticmethod
    def _validation_recognizer(config: XTTSConfig):
        """Whisper for training.select_by wer (a RecognizerUnavailableError, before any step,
        when it cannot hear the run's languages), else None."""
        if config.training.select_by != "wer":
            return None
        # pylint: disable=import-outside-toplevel  (the eval extra, only when it is used)
        from myxtts.evaluation.recognizer import load_recognizer
        recognizer, _ = load_recognizer("whisper", config.data.languages,
                                        config.training.recognizer_model or None)
        logger.info("Checkpoints are chosen by the word error rate %s hears in the "
                    "free-running validation sentences (Griffin-Lim audio).", recognizer.name)
        return recognizer

    def _selection_score(self, scalars: Dict[str, float]):
        """(score, measures): the number that ranks checkpoints, lower is better, and what
        model_info.json keeps of the best one. select_by objective: the step-independent
        objective (no guided-attention term, whose weight decays with the step). text_match:
        minus the text-match share plus 1e-4 x the mean own distance (capped below 50 dB, so it
        only breaks ties: a share moves by 1/N >= 0.005 for N <= 200 sentences). wer: the word
        error rate plus 1e-3 x the character error rate (capped below 10, a tie-break: a rate
        moves by at least 1/words)."""
        objective = scalars["loss/objective"]
        select_by = self.config.training.select_by
        if select_by == "wer":
            wer, cer = scalars["free_running/wer"], scalars["free_running/cer"]
            return (wer + 1e-3 * min(cer, 9.99),
                    [("WER", wer), ("CER", cer), ("validation loss", objective)])
        if select_by != "text_match":
            return objective, [("validation loss", objective)]
        match, distance = scalars["free_running/text_match"], scalars["free_running/mcd_own"]
        return (-match + 1e-4 * min(distance, 49.9),
                [("text-match", match), ("own DTW MCD dB", distance),
                 ("validation loss", objective)])

    def _alignment_measures(self, batch: Batch, alignments: np.ndarray,
                            mel_lengths: np.ndarray) -> List[Dict[str, float]]:
        """Focus, monotonicity and coverage of each item's alignment [steps, tokens] over its
        valid decoder steps (from `mel_lengths`) and tokens."""
        r = self.config.model.reduction_factor
        tokens = batch["token_lengths"].numpy()
        return [alignment_measures(alignments[i, : max(1, -(-int(n) // r)), : int(t)])
                for i, (n, t) in enumerate(zip(mel_lengths, tokens))]

    def _free_running(self, batch: Batch, items: int) -> Dict:
        """Free-running decodes of the batch's first `items` items with references from the
        batch: the output, its alignment measures, whether the stop head ended each item,
        generated and target lengths and both mels' cepstra."""
        k = min(items, _distinct_rows(batch))
        with tf.device(self.model_device):
            latents = self.model.speaker_latents(batch["ref_mel"][:k], batch["ref_lengths"][:k])
            out = self.model.generate(batch["tokens"][:k], batch["token_lengths"][:k],
                                      batch["language_ids"][:k], latents)
        lengths = np.maximum(out["mel_lengths"].numpy(), 1)
        target = np.maximum(batch["mel_lengths"][:k].numpy(), 1)
        mel, recorded = out["mel"].numpy(), batch["mel"][:k].numpy()
        return {"out": out, "lengths": lengths, "target": target,
                "measures": self._alignment_measures(batch, out["alignments"].numpy(), lengths),
                "stopped": out["stopped"].numpy(),
                "cepstra": [mel_cepstra(mel[i, :n]) for i, n in enumerate(lengths)],
                "recorded_cepstra": [mel_cepstra(recorded[i, :n]) for i, n in enumerate(target)],
                "errors": self._heard_errors(batch, mel, lengths)}

    def _heard_errors(self, batch: Batch, mel: np.ndarray, lengths: np.ndarray) -> List[tuple]:
        """(word errors, words, character errors, characters) of each free-running output, as
        the recogniser hears its Griffin-Lim audio against the text its tokens spell ([]
        without a recogniser)."""
        if self.recognizer is None:
            return []
        if self._griffin_lim is None:
            self._griffin_lim = GriffinLim.from_config(self.config.data)
        tokens, token_lengths = batch["tokens"].numpy(), batch["token_lengths"].numpy()
        languages = batch["language_ids"].numpy()
        counts = []
        for i, n in enumerate(lengths):
            text = self.tokenizer.decode(tokens[i, : int(token_lengths[i])])
            language = self.config.data.languages[int(languages[i])]
            heard = self.recognizer.transcribe(self._griffin_lim(mel[i, :n]).numpy(),
                                               self.config.data.sample_rate, language)
            counts.append((*word_errors(text, heard, language),
                           *character_errors(text, heard, language)))
        return counts

    @staticmethod
    def _free_running_figures(generated: List[Dict]) -> Dict[str, float]:
        """Means over every free-running sentence: alignment measures, the share ended by the
        stop head (not the length cap), the generated/target length ratio and, for two or
        more sentences, the text-match share and the mean DTW MCD to the own recording; with a
        recogniser (select_by wer), the word and character error rates it heard (total errors
        over total reference words / characters)."""
        figures = _mean_measures("free_running", [m for g in generated for m in g["measures"]])
        figures["free_running/ended_by_stop"] = float(np.mean(
            np.concatenate([g["stopped"] for g in generated])))
        figures["free_running/length_ratio"] = float(np.mean(
            np.concatenate([g["lengths"] / g["target"] for g in generated])))
        cepstra = [c for g in generated for c in g["cepstra"]]
        if len(cepstra) >= 2:
            distances = dtw_mcd_matrix(cepstra, [c for g in generated
                                                 for c in g["recorded_cepstra"]])
            figures["free_running/text_match"] = float(np.mean(text_match(distances)))
            figures["free_running/mcd_own"] = float(np.mean(np.diag(distances)))
        counts = np.array([c for g in generated for c in g["errors"]], np.float64)
        if len(counts):
            totals = counts.sum(axis=0)
            figures["free_running/wer"] = float(totals[0] / max(totals[1], 1.0))
            figures["free_running/cer"] = float(totals[2] / max(totals[3], 1.0))
        return figures

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

    # -- stopping ------------------------------------------------------------------------------
    def _stop_if_nonfinite(self) -> None:
        """Raises TrainingStopped if a non-finite streak reached training.max_nonfinite_steps
        since the last look (the step latched it on the device; the loop looks at every log,
        validation and checkpoint point, so at most log_every_steps - 1 steps later, and never
        saves after it)."""
        stopped_at = int(self.step.stopped_at.numpy())
        if stopped_at < 0:
            return
        tc = self.config.training
        raise TrainingStopped(
            f"Training stopped: {tc.max_nonfinite_steps} consecutive optimizer steps had "
            f"non-finite (NaN/Inf) gradients up to step {stopped_at} (seen at step "
            f"{self.global_step}), so they were skipped and no checkpoint was written since; "
            f"the last good checkpoint ({self.checkpoints.latest or 'none yet'}) is intact. "
            f"Try a lower learning rate (--lr, now {tc.learning_rate:g}) or longer warmup "
            f"(training.warmup_steps), --precision fp32 or mixed_bfloat16 instead of "
            f"{self.precision.policy}, a lower training.clip_norm, and check the data with "
            f"--validate-only.")

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
