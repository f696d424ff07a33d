"""A tiny checkpoint directory for the synthesis and export tests, written without a trainer.

The model (or the vocoder generator) is built and saved under `model/` (`generator/`) with the
training CheckpointStore, the layout training writes, plus config.yaml and vocab.json; no
optimizer, no training step: inference reads only the weights. The config makes decoding run to
the length limit (stop_threshold near 1: an untrained stop head would end at frame 1) with few
steps so the XLA decode loop compiles quickly.
"""

import atexit
import os
import shutil
import tempfile
from typing import Optional

import numpy as np

from myxtts.config import XTTSConfig
from myxtts.data.metadata import read_metadata
from myxtts.data.text import Tokenizer, clean_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO, "samples", "ljspeech_sample")
REFERENCE_AUDIO = os.path.join(SAMPLE_DIR, "wavs", "S003.flac")
# what REFERENCE_AUDIO says (samples/ljspeech_sample/metadata.csv, S003)
REFERENCE_TEXT = ("And God saw the light, that it was good: and God divided the light from the "
                  "darkness.")
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


def make_checkpoint(checkpoint_dir: str, step: int = 1, overrides: Optional[dict] = None):
    """Writes ckpt-<step>, config.yaml and vocab.json into `checkpoint_dir` (the tiny
    inference config with `overrides`, dotted keys); returns (prefix, the saved model weights).
    The weights are moved off their seeded initial values first, so a loader that silently kept
    initial values would not match them."""
    # pylint: disable=import-outside-toplevel
    import keras
    from myxtts.models.xtts import XTTSModel
    config = tiny_inference_config(checkpoint_dir).override(overrides or {}, source="test")
    tokenizer = sample_tokenizer(config.data.text_cleaners)
    keras.mixed_precision.set_global_policy("float32")
    model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                      config.data.n_mels)
    return _save(checkpoint_dir, config, tokenizer, {"model": model}, step), model.get_weights()


def finetuned_checkpoint(source_dir: str, checkpoint_dir: str, frozen: str, step: int = 2) -> str:
    """Writes ckpt-<step> of `source_dir`'s model into `checkpoint_dir` with every weight moved
    except those of its layer `frozen` (e.g. "speaker_encoder"), as fine-tuning with
    training.freeze leaves them; returns the prefix."""
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.checkpoint_loading import load_checkpoint
    loaded = load_checkpoint(source_dir)
    getattr(loaded.model, frozen).trainable = False
    return _save(checkpoint_dir, loaded.config, loaded.tokenizer, {"model": loaded.model}, step)


def _save(directory: str, config: XTTSConfig, tokenizer, objects: dict, step: int) -> str:
    """Moves every weight of `objects` off its seeded initial value (a loader that silently kept
    initial values would not match) and saves them as ckpt-<step>, with config.yaml (and
    vocab.json)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from myxtts.training.checkpoints import CheckpointStore
    rng = np.random.default_rng(step)
    for model in objects.values():
        for variable in model.trainable_variables:
            variable.assign(variable + rng.normal(0.0, 0.01, variable.shape).astype(np.float32))
    store = CheckpointStore(directory, {**objects, "step": tf.Variable(step, dtype=tf.int64)},
                            keep=5)
    store.write_sidecars(config, tokenizer)
    return store.save(step)


_SHARED_VOCODER = {}


def shared_vocoder_checkpoint(generator: str = "hifigan"):
    """(directory, generator weights) of a tiny vocoder checkpoint (vocoder.generator =
    `generator`; generator weights moved off their initial values). One per generator and test
    process, shared by the synthesis and export tests, which only read it; removed at exit."""
    if generator not in _SHARED_VOCODER:
        # pylint: disable=import-outside-toplevel
        from myxtts.vocoder.generator import build_generator
        directory = os.path.join(tempfile.mkdtemp(prefix="myxtts-vocoder-"), "vocoder")
        atexit.register(shutil.rmtree, os.path.dirname(directory), True)
        config = tiny_inference_config(directory).override({"vocoder.generator": generator},
                                                           source="test")
        built = build_generator(config)
        _save(directory, config, None, {"generator": built}, 1)
        _SHARED_VOCODER[generator] = (directory, built.get_weights())
    return _SHARED_VOCODER[generator]
