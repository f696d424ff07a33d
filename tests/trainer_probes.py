"""Tiny trainers and batches for the trainer tests, on the test run's two logical CPUs
(tests/logical_devices.py: /CPU:0 data, /CPU:1 model).

    from tests.trainer_probes import batch, make_trainer
    trainer = make_trainer(directory, grad_accum_steps=2)
    trainer.step(batch(seed=1))

A trainer sets process-wide TensorFlow/Keras state (the dtype policy, TF32, the random seeds):
tests that build one restore it with `restored_global_state()`.
"""

import contextlib
import os
import random

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras.src.backend.common import global_state  # noqa: E402
from tensorflow.python.eager import context  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.feeder import DeviceFeeder  # noqa: E402
from myxtts.data.text import Tokenizer  # noqa: E402
from myxtts.training.trainer import XTTSTrainer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(REPO, "configs", "tiny.yaml")
TOKENIZER = Tokenizer.build(["hello world"], "english")

# What keras.utils.set_random_seed sets besides the Python, NumPy and TensorFlow seeds (Keras and
# TensorFlow have setters for the seeds but no public getters: global_state and context).
_KERAS_SEED_ATTRIBUTES = ("global_random_seed", "global_seed_generator")


@contextlib.contextmanager
def restored_global_state():
    """Puts back on exit what a trainer (or a test) changes for the whole process: the Keras
    dtype policy, TF32, XLA auto-clustering, eager tf.functions, and the Python, NumPy,
    TensorFlow and Keras random seeds."""
    policy = keras.mixed_precision.global_policy()
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    jit = tf.config.optimizer.get_jit()
    eager = tf.config.functions_run_eagerly()
    python_random, numpy_random = random.getstate(), np.random.get_state()
    tf_seed = context.global_seed()
    keras_seed = {name: global_state.get_global_attribute(name)
                  for name in _KERAS_SEED_ATTRIBUTES}
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(policy)
        tf.config.experimental.enable_tensor_float_32_execution(tf32)
        tf.config.optimizer.set_jit(jit)
        tf.config.run_functions_eagerly(eager)
        random.setstate(python_random)
        np.random.set_state(numpy_random)
        tf.random.set_seed(tf_seed)
        for name, value in keras_seed.items():
            global_state.set_global_attribute(name, value)


def make_trainer(directory, model_fields=None, **training):
    """An XTTSTrainer of configs/tiny.yaml on the model device, checkpointing into
    `directory`, without dropout or warmup; `model_fields` overrides config.model fields and
    `training` config.training fields."""
    config = XTTSConfig.from_yaml(TINY)
    for key, value in (model_fields or {}).items():
        setattr(config.model, key, value)
    # No dropout: micro-batches and one big batch must see the same function.
    config.model.dropout = 0.0
    config.model.prenet_dropout = 0.0
    config.training.checkpoint_dir = str(directory)
    config.training.warmup_steps = 0
    for key, value in training.items():
        setattr(config.training, key, value)
    return XTTSTrainer(config, model_device=PLAN.model_device, tokenizer=TOKENIZER)


def batch(size=4, frames=24, tokens=10, seed=0, nan=False):
    """A batch dict on the data device; `nan` puts one NaN into the first mel."""
    # Equal lengths: the masked mean of a micro-batch then weighs frames like the big batch.
    rng = np.random.default_rng(seed)
    mel = rng.normal(-2.0, 1.0, (size, frames, 40)).astype(np.float32)
    if nan:
        mel[0, 3, 5] = np.nan
    with tf.device(PLAN.data_device):
        return {"tokens": tf.constant(rng.integers(1, TOKENIZER.vocab_size, (size, tokens)),
                                      tf.int32),
                "token_lengths": tf.fill([size], tokens),
                "language_ids": tf.zeros([size], tf.int32),
                "mel": tf.constant(mel), "mel_lengths": tf.fill([size], frames),
                "ref_mel": tf.constant(rng.normal(-2.0, 1.0, (size, 30, 40)), tf.float32),
                "ref_lengths": tf.fill([size], 30)}


def feeder_of(items, device):
    """What a pipeline's train_batches gives: a DeviceFeeder of these batch dicts."""
    stacked = {k: tf.stack([b[k] for b in items]) for k in items[0]}
    return DeviceFeeder(tf.data.Dataset.from_tensor_slices(stacked), lambda b: b,
                        PLAN.data_device, device)


def devices_of(variables):
    """The sorted device names ("device:CPU:1") holding `variables`."""
    # Keras variables wrap a tf.Variable in `.value`; plain tf.Variables have `.device`.
    return sorted({(v.device if isinstance(v, tf.Variable) else v.value.device).split("/")[-1]
                   for v in variables})


def split(b, parts):
    """`b` cut into `parts` equal micro-batches."""
    n = int(b["mel"].shape[0]) // parts
    return [{k: v[i * n:(i + 1) * n] for k, v in b.items()} for i in range(parts)]
