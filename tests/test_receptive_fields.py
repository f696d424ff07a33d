"""Each streaming stage states its receptive field (mel frames of context on each side): an
output frame or sample does not change when the input changes only farther away than that, and
does change when a neighbouring frame changes (the figure is not vacuous).

    python -m pytest tests/test_receptive_fields.py -v
"""

import numpy as np
import pytest
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.vocoder.generator import build_generator
from tests.data_samples import TINY
from tests.model_helpers import tiny_config, tiny_model

FRAMES, T = 72, 36


def _stage(name):
    """(function mel [1, F, n] → output [1, F * per_frame, ...], per_frame, receptive field)."""
    if name == "postnet":
        model = tiny_model(tiny_config())
        mask = tf.ones([1, FRAMES], tf.bool)
        return (lambda mel: model.postnet(mel, mask)), 1, model.postnet.receptive_field, \
            model.postnet.n_mels
    config = XTTSConfig.from_yaml(TINY)
    config.vocoder.generator = name
    tf.random.set_seed(0)
    generator = build_generator(config)
    return generator, config.data.hop_length, generator.receptive_field, config.data.n_mels


@pytest.mark.parametrize("name", ["postnet", "hifigan", "vocos"])
def test_outputs_depend_only_on_frames_within_the_receptive_field(name):
    run, per_frame, field, n_mels = _stage(name)
    assert 0 < field < T
    mel = np.random.default_rng(0).normal(-2.0, 1.0, [1, FRAMES, n_mels]).astype(np.float32)
    base = run(tf.constant(mel)).numpy()[0]
    span = slice(T * per_frame, (T + 1) * per_frame)  # what frame T gives
    far = mel.copy()
    far[:, : T - field] += 1.0
    far[:, T + field + 1:] += 1.0
    np.testing.assert_allclose(run(tf.constant(far)).numpy()[0][span], base[span], atol=1e-5)
    near = mel.copy()
    near[:, T + 1] += 1.0
    assert np.max(np.abs(run(tf.constant(near)).numpy()[0][span] - base[span])) > 1e-4
