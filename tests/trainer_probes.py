"""Probe code shared by the trainer tests: runs after device_harness.PRELUDE (two logical CPUs,
/CPU:0 data, /CPU:1 model) in a fresh process."""

SETUP = """
import math, os, tempfile
import numpy as np
from myxtts.config import XTTSConfig
from myxtts.data.text import Tokenizer
from myxtts.training.trainer import XTTSTrainer

TOKENIZER = Tokenizer.build(["hello world"], "english")


def make_trainer(directory, **training):
    config = XTTSConfig.from_yaml("configs/tiny.yaml")
    # No dropout: micro-batches and one big batch must see the same function.
    config.model.dropout = 0.0
    config.model.prenet_dropout = 0.0
    config.training.checkpoint_dir = directory
    config.training.warmup_steps = 0
    for key, value in training.items():
        setattr(config.training, key, value)
    return XTTSTrainer(config, model_device=plan.model_device, tokenizer=TOKENIZER)


def batch(size=4, frames=24, tokens=10, seed=0, nan=False):
    # Equal lengths: the masked mean of a micro-batch then weighs frames like the big batch.
    rng = np.random.default_rng(seed)
    mel = rng.normal(-2.0, 1.0, (size, frames, 40)).astype(np.float32)
    if nan:
        mel[0, 3, 5] = np.nan
    with tf.device(plan.data_device):
        return {"tokens": tf.constant(rng.integers(1, TOKENIZER.vocab_size, (size, tokens)),
                                      tf.int32),
                "token_lengths": tf.fill([size], tokens),
                "language_ids": tf.zeros([size], tf.int32),
                "mel": tf.constant(mel), "mel_lengths": tf.fill([size], frames),
                "ref_mel": tf.constant(rng.normal(-2.0, 1.0, (size, 30, 40)), tf.float32),
                "ref_lengths": tf.fill([size], 30)}


def feeder_of(items, device):
    # What a pipeline's train_batches gives: a DeviceFeeder of these batch dicts.
    from myxtts.data.feeder import DeviceFeeder
    stacked = {k: tf.stack([b[k] for b in items]) for k in items[0]}
    return DeviceFeeder(tf.data.Dataset.from_tensor_slices(stacked), lambda b: b,
                        plan.data_device, device)


def devices_of(variables):
    # Keras variables wrap a tf.Variable in `.value`; plain tf.Variables have `.device`.
    return sorted({(v.device if isinstance(v, tf.Variable) else v.value.device).split("/")[-1]
                   for v in variables})


def split(b, parts):
    n = int(b["mel"].shape[0]) // parts
    return [{k: v[i * n:(i + 1) * n] for k, v in b.items()} for i in range(parts)]

workdir = tempfile.mkdtemp()
out = {}
"""
