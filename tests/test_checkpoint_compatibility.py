"""Checkpoints written by earlier code still fit (tests/checkpoint_fixtures.py recorded them):
every shipped recipe's model and the vocoder recipe's generators have the checkpoint variables,
with the shapes, they had, and the recorded tiny checkpoint loads and synthesizes the mel it
synthesized then."""

import json
import os

import numpy as np

from tests import checkpoint_fixtures


def test_every_recipes_checkpoint_has_the_variables_it_had():
    with open(os.path.join(checkpoint_fixtures.FOLDER, "layouts.json"), encoding="utf-8") as f:
        recorded = json.load(f)
    now = checkpoint_fixtures.layouts()
    assert sorted(now) == sorted(recorded)
    for recipe, variables in recorded.items():
        assert now[recipe] == variables, recipe


def test_the_recorded_checkpoint_synthesizes_what_it_did():
    folder = os.path.join(checkpoint_fixtures.FOLDER, "tiny")
    expected = np.load(os.path.join(folder, "expected.npz"))["mel"]
    mel = checkpoint_fixtures.tiny_mel(folder)
    assert mel.shape == expected.shape
    np.testing.assert_allclose(mel, expected, atol=1e-4)
