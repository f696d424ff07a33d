"""Checkpoints as the shipped recipes write them, recorded so that a change to the model code can
be checked against what earlier code wrote (tests/test_checkpoint_compatibility.py):

- `layouts.json`: for each shipped recipe (its configs/*.yaml) the variables, with shapes, of a
  checkpoint of its model, and of the vocoder recipe's two generators;
- `tiny/`: a checkpoint of the tiny test model (ckpt-1, config.yaml, vocab.json) and
  `tiny/expected.npz`, the mel it synthesizes for TEXT with the voice of REFERENCE_AUDIO.

    python -m tests.checkpoint_fixtures     # rewrites tests/data/checkpoints/

Rewrite them only on purpose: they are the record of what checkpoints users hold look like.
"""

import json
import os
import shutil
import tempfile

import numpy as np

from tests.inference_helpers import REFERENCE_AUDIO, make_checkpoint

FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "checkpoints")
RECIPES = ("tiny", "quick", "real_quick", "clone_quick")
VOCODERS = ("hifigan", "vocos")  # configs/vocoder_quick.yaml with vocoder.generator set
VOCAB_SIZE = 64  # the embedding's rows: a corpus's own; the layout is the same for any
TEXT = "In the beginning God created the heaven and the earth."
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _variables(objects: dict) -> dict:
    """{checkpoint key: shape} of a checkpoint holding `objects` (saved to a temporary folder)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    with tempfile.TemporaryDirectory() as folder:
        path = tf.train.Checkpoint(**objects).write(os.path.join(folder, "ckpt"))
        return {name: list(shape) for name, shape in tf.train.list_variables(path)
                if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def layouts() -> dict:
    """{recipe: {checkpoint key: shape}} of models built by the code as it is now."""
    # pylint: disable=import-outside-toplevel
    import keras

    from myxtts.config import XTTSConfig
    from myxtts.models.xtts import XTTSModel
    from myxtts.vocoder.generator import build_generator
    keras.mixed_precision.set_global_policy("float32")
    found = {}
    for recipe in RECIPES:
        config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", f"{recipe}.yaml"))
        model = XTTSModel(config.model, VOCAB_SIZE, len(config.data.languages),
                          config.data.n_mels)
        found[recipe] = _variables({"model": model})
    for generator in VOCODERS:
        config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "vocoder_quick.yaml"))
        config.override({"vocoder.generator": generator}, source="checkpoint_fixtures")
        found[f"vocoder_quick/{generator}"] = _variables({"generator": build_generator(config)})
    return found


def tiny_mel(directory: str) -> np.ndarray:
    """The mel [T, n_mels] the checkpoint in `directory` synthesizes for TEXT."""
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.synthesizer import Synthesizer
    synthesizer = Synthesizer.from_checkpoint_dir(directory)
    return synthesizer.synthesize(TEXT, "en", synthesizer.speaker_latents(REFERENCE_AUDIO))[1]


def main() -> None:
    shutil.rmtree(FOLDER, ignore_errors=True)
    os.makedirs(FOLDER)
    with open(os.path.join(FOLDER, "layouts.json"), "w", encoding="utf-8") as f:
        json.dump(layouts(), f, indent=0, sort_keys=True)
    tiny = os.path.join(FOLDER, "tiny")
    make_checkpoint(tiny)
    for name in os.listdir(tiny):  # the checkpoint and its sidecars only
        if name not in ("checkpoint", "config.yaml", "vocab.json") and \
                not name.startswith("ckpt-1."):
            path = os.path.join(tiny, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    config = os.path.join(tiny, "config.yaml")  # no path of this machine in it
    with open(config, encoding="utf-8") as f:
        text = f.read().replace(REPO + os.sep, "")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text)
    np.savez_compressed(os.path.join(tiny, "expected.npz"), mel=tiny_mel(tiny))


if __name__ == "__main__":
    main()
