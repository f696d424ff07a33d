"""A tiny checkpoint directory written by the real trainer, for the synthesis and export tests.

XTTSTrainer builds the model, optimizer and counters and saves them with its CheckpointStore
(the exact structure training writes), plus config.yaml and vocab.json. Training steps are
skipped: they cost an XLA compile per bucket, and inference only needs weights in that layout.
The config makes decoding run to the length limit (stop_threshold near 1: an untrained stop head
would end at frame 1) with few steps so the XLA decode loop compiles quickly.
"""

import atexit
import os
import shutil
import tempfile

import numpy as np

from myxtts.config import XTTSConfig
from myxtts.data.metadata import read_metadata
from myxtts.data.text import Tokenizer, clean_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO, "samples", "ljspeech_sample")
REFERENCE_AUDIO = os.path.join(SAMPLE_DIR, "wavs", "S003.flac")
MAX_DECODER_STEPS = 12
GRIFFIN_LIM_ITERS = 4


def tiny_inference_config(checkpoint_dir: str) -> XTTSConfig:
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
    return config.override({"training.checkpoint_dir": checkpoint_dir,
                            "model.stop_threshold": 0.999999,
                            "model.max_decoder_steps": MAX_DECODER_STEPS}, source="test")


def sample_tokenizer(cleaner: str) -> Tokenizer:
    rows, _ = read_metadata(os.path.join(SAMPLE_DIR, "metadata.csv"), "sample", "en")
    return Tokenizer.build((clean_text(r.text, cleaner, r.language) for r in rows), cleaner)


def make_checkpoint(checkpoint_dir: str, step: int = 1):
    """Writes ckpt-<step>, config.yaml and vocab.json into `checkpoint_dir`; returns (prefix,
    the saved model weights). The weights are moved off their seeded initial values first, so a
    loader that silently kept initial values would not match them."""
    from myxtts.training.trainer import XTTSTrainer  # pylint: disable=import-outside-toplevel
    config = tiny_inference_config(checkpoint_dir)
    trainer = XTTSTrainer(config, model_device="/CPU:0",
                          tokenizer=sample_tokenizer(config.data.text_cleaners))
    rng = np.random.default_rng(step)
    for variable in trainer.model.trainable_variables:
        variable.assign(variable + rng.normal(0.0, 0.01, variable.shape).astype(np.float32))
    trainer.step.step.assign(step)
    return trainer.checkpoints.save(step), trainer.model.get_weights()


_SHARED_VOCODER = {}


def shared_vocoder_checkpoint(generator: str = "hifigan"):
    """(directory, generator weights) of a tiny vocoder checkpoint (vocoder.generator =
    `generator`) written by the real VocoderTrainer (generator weights moved off their initial
    values, no training steps). One per generator and test process, shared by the synthesis and
    export tests, which only read it (building the vocoder trainer costs seconds); removed at
    exit."""
    if generator not in _SHARED_VOCODER:
        # pylint: disable=import-outside-toplevel
        from myxtts.training.vocoder_trainer import VocoderTrainer
        directory = os.path.join(tempfile.mkdtemp(prefix="myxtts-vocoder-"), "vocoder")
        atexit.register(shutil.rmtree, os.path.dirname(directory), True)
        config = tiny_inference_config(directory).override({"vocoder.generator": generator},
                                                           source="test")
        trainer = VocoderTrainer(config, model_device="/CPU:0")
        rng = np.random.default_rng(100)
        for variable in trainer.generator.trainable_variables:
            variable.assign(variable + rng.normal(0.0, 0.01, variable.shape).astype(np.float32))
        trainer.step.step.assign(1)
        trainer.checkpoints.save(1)
        _SHARED_VOCODER[generator] = (directory, trainer.generator.get_weights())
    return _SHARED_VOCODER[generator]
