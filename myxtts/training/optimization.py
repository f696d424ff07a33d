"""The optimizer: Keras AdamW (default) or Muon, global-norm clipping, weight decay that skips
norms, biases and embeddings, an optional moving average of the weights (training.ema_momentum),
and a LossScaleOptimizer around it for float16.

Call `build_optimizer` inside `tf.device(model_device)`: it BUILDS the optimizer, so every slot,
the iteration counter, the learning rate and the loss-scale state are created there. (Built
lazily on the first step instead, they could land on whatever device that step's inputs live on,
and XLA then refuses the step with "Trying to access resource ... located in device".)
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import keras
import tensorflow as tf

from myxtts.config import TrainingConfig
from myxtts.training.schedules import ScheduleClock, build_schedule


def no_decay_variables(model: keras.Model) -> List:
    """Variables weight decay must not touch: vectors and scalars (biases, norm scales/offsets)
    and embedding tables (keras Embedding layers, or any weight whose path says 'embedding')."""
    embedding_ids = {id(v) for layer in model._flatten_layers()  # pylint: disable=protected-access
                     if isinstance(layer, keras.layers.Embedding)
                     for v in layer.trainable_variables}
    return [v for v in model.trainable_variables
            if len(v.shape) <= 1 or id(v) in embedding_ids or "embedding" in v.path.lower()]


class FusedAdamW(keras.optimizers.AdamW):
    """Keras AdamW with the same update on the same slot variables (checkpoints are
    interchangeable with keras.optimizers.AdamW's), in fewer operations: each variable's Adam
    update is TensorFlow's fused kernel (one ResourceApplyAdam op instead of about twenty small
    ones), and its weight decay uses the step's learning rate computed once (Keras evaluates
    the schedule again for every variable it decays). A step traces in a fraction of the time
    and runs fewer kernels (benchmarks/bench_optimizer.py). Variables that are not float32
    take Keras's own update."""

    def __init__(self, *args, name: str = "adam_w", **kwargs):
        # Keras AdamW's own name, so every slot keeps its path (adam_w/<variable>_momentum).
        super().__init__(*args, name=name, **kwargs)

    def _apply_weight_decay(self, variables):
        """Applied by update_step instead, first, as Keras applies it before the update."""

    def update_step(self, gradient, variable, learning_rate):
        if self.weight_decay is not None and self._use_weight_decay(variable):
            decay = tf.cast(learning_rate, variable.dtype) * tf.cast(self.weight_decay,
                                                                     variable.dtype)
            variable.assign_sub(variable * decay)
        if self.amsgrad or variable.dtype != "float32":
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, tf.float32)
        beta_1, beta_2 = tf.cast(self.beta_1, tf.float32), tf.cast(self.beta_2, tf.float32)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._momentums[index]),
            v=_handle(self._velocities[index]), beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, tf.float32),
            beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, tf.float32),
            grad=tf.cast(gradient, tf.float32))
        return None


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle


def build_optimizer(tc: TrainingConfig, model: keras.Model, loss_scaling: bool,
                    clock: Optional[ScheduleClock] = None):
    """A built optimizer for `model.trainable_variables` (LossScaleOptimizer when loss_scaling);
    its schedule also advances by `clock` when one is given (training.lr_clock)."""
    common = dict(learning_rate=build_schedule(tc, clock), weight_decay=tc.weight_decay,
                  global_clipnorm=tc.clip_norm or None, use_ema=tc.ema_momentum > 0,
                  ema_momentum=tc.ema_momentum or 0.99)
    if tc.optimizer == "muon":
        # Muon uses its AdamW branch for non-2-D weights and embeddings, with adam_weight_decay.
        optimizer = keras.optimizers.Muon(adam_beta_1=tc.beta_1, adam_beta_2=tc.beta_2,
                                          adam_weight_decay=tc.weight_decay, **common)
    else:
        optimizer = FusedAdamW(beta_1=tc.beta_1, beta_2=tc.beta_2, **common)
    optimizer.exclude_from_weight_decay(var_list=no_decay_variables(model))
    if loss_scaling:
        # Unscales before the inner optimizer runs, so the inner optimizer's global_clipnorm
        # clips the TRUE gradient; on non-finite gradients it skips the update and halves the
        # scale.
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def weight_averages(optimizer) -> List[Tuple]:
    """(trained variable, its moving average) for every variable `optimizer` updates; [] without
    training.ema_momentum. The averages are optimizer variables, so checkpoints of the optimizer
    keep them."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer wraps it
    if not inner.use_ema:
        return []
    # pylint: disable=protected-access
    return list(zip(inner._trainable_variables, inner._model_variables_moving_average))
