"""The compiled training step on the model device.

One call = one micro-batch: forward, (scaled) loss, gradients. With grad_accum_steps = N > 1 the
gradients are averaged into accumulator variables on the model device and every N-th call applies
them; everything happens inside one `tf.function(jit_compile=...)`.

Keras optimizers have `gradient_accumulation_steps`, but it is not used here: its learning-rate
schedule counts micro-batches instead of updates (warmup would be N times too short), it checks
finiteness per micro-batch instead of per update, and it never exposes the averaged gradient,
whose norm we log. The accumulators below are the few lines that replace it.

Non-finite updates are skipped and counted: under float16 the LossScaleOptimizer skips them and
halves the scale; otherwise the update is not applied. The counters live on the model device and
are checkpointed by the trainer. When `max_nonfinite_steps` consecutive updates were non-finite
the step latches `stopped_at` (the step at which the streak reached the limit) and returns
`stop`; nothing is read back to the host here, so the caller can queue the next step at once and
look at the flag when it reads its other figures (the trainer: at its log, validation and
checkpoint points). `on_micro_batch(batch)` runs inside the compiled step for the caller's own
device-side counts (the trainer: data position and true frames).

`update_scales` give variables (or rows of them) a fraction of the optimizer's update: the new
value is old + scale * (optimizer's value - old), i.e. a per-element learning rate for Adam(W) and
Muon, whose updates (weight decay included) are proportional to the learning rate; where the scale
is 0 the old value is kept bit for bit. Keras optimizers have one learning rate for all variables,
and scaling gradients instead would not slow Adam down (it divides the scale out).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence, Union

import keras
import tensorflow as tf

LossFn = Callable[[Dict[str, tf.Tensor], tf.Tensor, bool], Dict[str, tf.Tensor]]
ScaleLike = Optional[Union[float, tf.Tensor]]


class TrainStep:
    """Owns the step counters, accumulators and on-device metrics; `__call__(batch)` runs a step.

    `loss_fn(batch, step, training)` returns a dict of float32 scalars named `loss_names`, one
    of them "total" (the loss that is differentiated). `max_nonfinite_steps` (0 = never) sets
    when `stop` latches. `update_scales`, one per trainable variable
    (None = the full update), are floats or float32 tensors broadcastable to the variable.
    """

    def __init__(self, model: keras.Model, optimizer, loss_fn: LossFn, *, loss_names,
                 model_device: str, grad_accum_steps: int = 1, jit_compile: bool = True,
                 max_nonfinite_steps: int = 0,
                 on_micro_batch: Optional[Callable[[Dict[str, tf.Tensor]], None]] = None,
                 update_scales: Optional[Sequence[ScaleLike]] = None):
        self.model = model
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.model_device = model_device
        self.accum = int(grad_accum_steps)
        self.max_nonfinite_steps = int(max_nonfinite_steps)
        self.on_micro_batch = on_micro_batch
        self.update_scales = list(update_scales or [None] * len(model.trainable_variables))
        self.loss_scaling = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        variables = model.trainable_variables
        with self._variable_scope():
            # Optimizer updates attempted (applied + skipped): the step users see.
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
            self.nonfinite_total = tf.Variable(0, dtype=tf.int64, trainable=False,
                                               name="nonfinite_total")
            self.nonfinite_consecutive = tf.Variable(0, dtype=tf.int64, trainable=False,
                                                     name="nonfinite_consecutive")
            self.micro_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="micro_step")
            # Not checkpointed: the trainer never saves once the streak stopped training.
            self.stopped_at = tf.Variable(-1, dtype=tf.int64, trainable=False, name="stopped_at")
            self.accumulators = [
                tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                            name=f"accum_{i}") for i, v in enumerate(variables)
            ] if self.accum > 1 else []
        with tf.device(model_device):
            self.grad_norm = keras.metrics.Mean(name="grad_norm")
            self.loss_metrics = {name: keras.metrics.Mean(name=f"loss_{name}")
                                 for name in loss_names}
        self._compiled = self._compile(jit_compile)

    def _variable_scope(self):
        """Where the counters and accumulators are created (MirroredTrainStep: the strategy)."""
        return tf.device(self.model_device)

    def _compile(self, jit_compile: bool):
        return tf.function(self._step, jit_compile=jit_compile, reduce_retracing=False)

    # -- public --------------------------------------------------------------------------------
    def __call__(self, batch: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
        """Runs one micro-batch on the model device; returns scalars on the model device
        (nothing is read back to the host): total (this micro-batch's loss), updated (an
        optimizer update boundary was reached), finite (that update was finite),
        consecutive_nonfinite, stop (a non-finite streak reached max_nonfinite_steps, now or
        earlier)."""
        with tf.device(self.model_device):
            return self._compiled(batch)

    def resume_state(self) -> Dict[str, tf.Module]:
        """What a checkpoint needs beyond the model and optimizer for a resumed run to be the
        run that would have happened: the micro-step counter, the gradient accumulators (an
        epoch can end mid-accumulation) and the dropout seed generator's state."""
        state = tf.Module()
        state.micro_step = self.micro_step
        state.nonfinite_consecutive = self.nonfinite_consecutive
        state.accumulators = list(self.accumulators)
        seed_generator = getattr(self.model, "seed_generator", None)
        if seed_generator is not None:
            state.dropout_seed = seed_generator.state.value
        return {"step_state": state}

    def updates_after(self, micro_steps: int) -> bool:
        """Whether the `micro_steps`-th micro-batch (counting `micro_step` and on) ends an
        optimizer update: the host knows without reading the step's `updated`."""
        return micro_steps % self.accum == 0

    def reset_metrics(self) -> None:
        for metric in [self.grad_norm, *self.loss_metrics.values()]:
            metric.reset_state()

    def metric_results(self) -> Dict[str, float]:
        """Means since the last reset (losses per micro-batch, grad_norm per update)."""
        out = {name: float(m.result()) for name, m in self.loss_metrics.items()}
        out["grad_norm"] = float(self.grad_norm.result())
        return out

    def loss_scale(self) -> float:
        return float(self.optimizer.dynamic_scale.numpy()) if self.loss_scaling else 1.0

    def learning_rate(self) -> float:
        return float(self.optimizer.learning_rate.numpy())

    # -- internals -----------------------------------------------------------------------------
    def _step(self, batch):
        with tf.device(self.model_device):
            variables = self.model.trainable_variables
            with tf.GradientTape() as tape:
                losses = self.loss_fn(batch, self.step, True)
                loss = losses["total"]
                scaled = self.optimizer.scale_loss(loss) if self.loss_scaling else loss
            grads = tape.gradient(scaled, variables)
            grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                     for g, v in zip(grads, variables)]
            for name, metric in self.loss_metrics.items():
                metric.update_state(losses[name])
            if self.on_micro_batch is not None:
                self.on_micro_batch(batch)

            if self.accum == 1:
                finite = self._apply(grads)
                updated = tf.constant(True)
            else:
                for acc, g in zip(self.accumulators, grads):
                    acc.assign_add(g / self.accum)
                self.micro_step.assign_add(1)
                updated = tf.equal(self.micro_step % self.accum, 0)
                finite = tf.cond(updated, self._apply_accumulated, lambda: tf.constant(True))
            return {"total": loss, "updated": updated, "finite": finite,
                    "consecutive_nonfinite": self.nonfinite_consecutive.read_value(),
                    "stop": self.stopped_at.read_value() >= 0}

    def _apply_accumulated(self):
        finite = self._apply([acc.read_value() for acc in self.accumulators])
        for acc in self.accumulators:
            acc.assign(tf.zeros_like(acc))
        return finite

    def _apply(self, grads):
        """One optimizer update from (possibly loss-scaled) gradients; returns `finite`."""
        finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
        scale = self.optimizer.dynamic_scale if self.loss_scaling else 1.0
        norm = tf.linalg.global_norm(grads) / scale  # the unscaled, unclipped norm
        scaled = [(v, s, v.value.read_value()) for v, s in
                  zip(self.model.trainable_variables, self.update_scales) if s is not None]
        if self.loss_scaling:
            self.optimizer.apply(grads)  # skips and halves the scale itself when not finite
        else:
            def apply():
                self.optimizer.apply(grads)
                return tf.constant(True)
            tf.cond(finite, apply, lambda: tf.constant(False))
        for variable, fraction, before in scaled:
            variable.assign(tf.where(fraction > 0, before + fraction * (variable - before),
                                     before))
        self.grad_norm.update_state(tf.where(finite, norm, 0.0),
                                    sample_weight=tf.cast(finite, tf.float32))
        self.step.assign_add(1)
        self.nonfinite_total.assign_add(tf.cast(tf.logical_not(finite), tf.int64))
        streak = self.nonfinite_consecutive.assign(
            tf.where(finite, tf.constant(0, tf.int64), self.nonfinite_consecutive + 1))
        if self.max_nonfinite_steps:
            reached = (self.stopped_at < 0) & (streak >= self.max_nonfinite_steps)
            self.stopped_at.assign(tf.where(reached, self.step.read_value(), self.stopped_at))
        return finite
