"""A resumed run is the run that would have happened: with dropout on and gradient accumulation
(2 micro-batches per update), a run saved mid-accumulation and restored in a new trainer draws
the same dropout masks and applies the same accumulated update as the run that went on.

    python -m pytest tests/test_resume_state.py -v
"""

import os
import tempfile
import unittest

import tests.logical_devices  # noqa: F401  (first: configures the devices before TensorFlow)

import numpy as np  # noqa: E402

from tests.trainer_probes import batch, make_trainer, restored_global_state  # noqa: E402
import pytest

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow


class ResumeStateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.enterClassContext(restored_global_state())
        directory = os.path.join(cls.enterClassContext(tempfile.TemporaryDirectory()), "run")
        a = make_trainer(directory, grad_accum_steps=2)
        a.model.decoder.prenet.rate = 0.5  # make_trainer turns dropout off; the seed must matter
        for s in range(3):  # one update, then half of the next
            a.step(batch(seed=s))
        a._save()  # pylint: disable=protected-access
        b = make_trainer(directory, grad_accum_steps=2)
        b.model.decoder.prenet.rate = 0.5
        cls.a, cls.b = a, b
        # Read before the next step changes them.
        cls.micro_step = [int(a.step.micro_step.numpy()), int(b.step.micro_step.numpy())]
        cls.accumulators = [[x.numpy().copy() for x in t.step.accumulators] for t in (a, b)]
        cls.seeds = [t.model.seed_generator.state.numpy().copy() for t in (a, b)]
        cls.results = a.step(batch(seed=7)), b.step(batch(seed=7))

    def test_accumulation_state_is_restored_mid_update(self):
        self.assertEqual(self.micro_step, [3, 3])
        saved, restored = self.accumulators
        self.assertTrue(any(float(np.abs(x).max()) > 0 for x in saved))
        self.assertTrue(all(np.array_equal(x, y) for x, y in zip(saved, restored)))

    def test_dropout_seed_state_is_restored(self):
        self.assertTrue(np.array_equal(*self.seeds))
        self.assertEqual(*(float(r["total"]) for r in self.results))

    def test_the_resumed_update_is_the_update_that_would_have_happened(self):
        self.assertEqual([bool(r["updated"]) for r in self.results], [True, True])
        weights_diff = max(float(np.max(np.abs(x - y))) for x, y in
                           zip(self.a.model.get_weights(), self.b.model.get_weights()))
        self.assertLessEqual(weights_diff, 1e-6)


if __name__ == "__main__":
    unittest.main()
