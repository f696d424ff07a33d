"""The training step under a tf.distribute strategy: TrainStep's update on the global batch,
computed by several model replicas (MirroredStrategy on one machine, MultiWorkerMirroredStrategy
across machines; myxtts.training.distribution).

One call = one micro-batch of the global batch, already split by the data device into one
equal-shaped slice per replica (Distribution.distribute_batch):

  replica context (`strategy.run`, once per model device): the loss counts of the slice
      (valid mel values, stop frames, attention rows; `count_fn`, from the batch alone) are
      summed over every replica (`ReplicaContext.all_reduce`); then the forward and backward
      pass, in which each replica divides its loss SUMS by those global counts
      (myxtts.training.losses), so the replicas' losses and gradients add up to the loss and
      gradient of the global batch: a frame weighs the same wherever it lands.
  cross-replica context: the gradients are summed over the replicas onto the variables' devices
      (`extended.batch_reduce_to`, one all-reduce per micro-batch), then the update is exactly
      TrainStep's: accumulation, non-finite skipping, loss scaling, clipping after unscaling
      (the inner optimizer's global_clipnorm), the counters.

Why the optimizer is not called inside `strategy.run`, as Keras' own fit does: Keras 3's
optimizer, called per replica, clips each replica's LOCAL gradients before its all-reduce, and
LossScaleOptimizer checks each replica's local gradients for NaN/Inf, so clipping and skipping
would depend on how the batch was split; and an XLA-compiled `apply_gradients` under a strategy
cannot reach the other replicas' variables (its merge_call leaves the compiled function). Called
in the cross-replica context with already-reduced gradients, the optimizer updates every
component of each MirroredVariable itself (`extended.update`) and needs no merge_call. Under
training.xla each replica's forward and backward pass is one XLA-compiled function (the loss
counts are all-reduced before it, which is why they come from the batch alone); the all-reduces
and the update run in a plain tf.function around it. (Compiling the forward pass alone does not
work: the gradient of a compiled decoder loop needs TensorLists to cross the XLA boundary.)

Whether a micro-batch ends an optimizer update is decided on the host, which counts the
micro-batches anyway, instead of by a tf.cond on the device: collective all-reduces inside a
data-dependent branch are not safe across workers.

Dropout: a MirroredVariable cannot be assigned from one replica, so the model's seed generator is
advanced once per micro-batch in the cross-replica context and each replica folds in its replica
id (`batch["dropout_seed"]`, which XTTSModel.call uses instead of drawing a seed).

The run's metrics (losses, gradient norm) are plain variables on the first model device, updated
with the reduced values; `on_micro_batch` gets {"mel_lengths": the global batch's lengths}.
"""

from __future__ import annotations

from typing import Dict, Optional

import keras
import tensorflow as tf

from myxtts.training.step import TrainStep

SUM = tf.distribute.ReduceOp.SUM


class MirroredTrainStep(TrainStep):
    """TrainStep over `distribution`'s replicas; `__call__` takes the PerReplica batch dict that
    `distribution.distribute_batch` (the feeder) gives.

    `count_fn(batch)` gives the slice's loss counts (a dict of float32 scalars);
    `loss_fn(batch, step, training, counts=global counts)` must return, per replica, values
    whose sum over the replicas is the global batch's value (the trainer divides its loss sums
    by the counts).
    """

    def __init__(self, model: keras.Model, optimizer, loss_fn, *, distribution, count_fn,
                 **kwargs):
        self.distribution = distribution
        self.strategy = distribution.strategy
        self.count_fn = count_fn
        self._host_micro: Optional[int] = None
        super().__init__(model, optimizer, loss_fn, model_device=distribution.primary_device,
                         **kwargs)

    def _variable_scope(self):
        return self.distribution.scope()

    def _compile(self, jit_compile: bool):
        # jit_compile applies to each replica's forward and backward pass (see the module
        # docstring); the function around the all-reduces and the update stays plain.
        self._replica_gradients = tf.function(self._gradients, jit_compile=jit_compile,
                                              reduce_retracing=False)
        return tf.function(self._distributed_step, reduce_retracing=False)

    def __call__(self, batch) -> Dict[str, tf.Tensor]:
        """Runs one micro-batch of the global batch; returns TrainStep's scalars, on the first
        model device."""
        if self._host_micro is None:  # after a restore: read once
            self._host_micro = int(self.micro_step.numpy())
        apply = True
        if self.accum > 1:
            self._host_micro += 1
            apply = self._host_micro % self.accum == 0
        with tf.device(self.model_device):  # the cross-replica part and the outputs
            return self._compiled(batch, apply)

    # -- internals -----------------------------------------------------------------------------
    def _replica_step(self, batch, seed):
        context = tf.distribute.get_replica_context()
        if seed is not None:
            batch = dict(batch, dropout_seed=tf.random.experimental.stateless_fold_in(
                seed, context.replica_id_in_sync_group))
        counts = context.all_reduce(SUM, self.count_fn(batch))
        grads, losses = self._replica_gradients(batch, counts)
        return grads, losses, batch["mel_lengths"]

    def _gradients(self, batch, counts):
        """This replica's share of the losses and its (scaled) gradients."""
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            losses = self.loss_fn(batch, self.step, True, counts=counts)
            scaled = losses["total"]
            if self.loss_scaling:
                scaled = self.optimizer.scale_loss(scaled)
        grads = tape.gradient(scaled, variables)
        return [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                for g, v in zip(grads, variables)], losses

    def _distributed_step(self, batch, apply: bool):
        seed = None
        if getattr(self.model, "seed_generator", None) is not None:
            seed = keras.random.randint((2,), 0, 2 ** 31 - 1, seed=self.model.seed_generator,
                                        dtype="int32")
        grads, losses, lengths = self.strategy.run(self._replica_step, args=(batch, seed))
        variables = self.model.trainable_variables
        grads = self.strategy.extended.batch_reduce_to(
            SUM, [(g, v.value) for g, v in zip(grads, variables)])
        with tf.device(self.model_device):
            losses = {name: self.strategy.reduce(SUM, value, axis=None)
                      for name, value in losses.items()}
            for name, metric in self.loss_metrics.items():
                metric.update_state(losses[name])
            if self.on_micro_batch is not None:
                self.on_micro_batch({"mel_lengths": self.strategy.gather(lengths, axis=0)})
            if self.accum == 1:
                finite = self._apply(grads)
            else:
                for accumulator, g in zip(self.accumulators, grads):
                    self.strategy.extended.update(
                        accumulator, lambda a, g: a.assign_add(g / self.accum), args=(g,),
                        group=False)
                self.micro_step.assign_add(1)
                finite = self._apply_accumulated() if apply else tf.constant(True)
            return {"total": losses["total"], "updated": tf.constant(apply), "finite": finite,
                    "consecutive_nonfinite": self.nonfinite_consecutive.read_value(),
                    "stop": self.stopped_at.read_value() >= 0}
