"""A resumed run is the run that would have happened: with dropout on and gradient accumulation
(2 micro-batches per update), a run saved mid-accumulation and restored in a new trainer draws
the same dropout masks and applies the same accumulated update as the run that went on.

    python -m pytest tests/test_resume_state.py -v
"""

import unittest

from tests.device_harness import run_probe
from tests.trainer_probes import SETUP

PROBE = SETUP + """
def trainer(d):
    return make_trainer(d, grad_accum_steps=2)

d = os.path.join(workdir, "run")
a = trainer(d)
a.model.decoder.prenet.rate = 0.5  # make_trainer turns dropout off; the seed must matter here
for s in range(3):  # one update, then half of the next
    a.step(batch(seed=s))
a._save()
b = trainer(d)
b.model.decoder.prenet.rate = 0.5
out["micro_step"] = [int(a.step.micro_step.numpy()), int(b.step.micro_step.numpy())]
out["accumulators_equal"] = all(np.array_equal(x.numpy(), y.numpy())
                                for x, y in zip(a.step.accumulators, b.step.accumulators))
out["accumulator_nonzero"] = any(float(np.abs(x.numpy()).max()) > 0 for x in a.step.accumulators)
out["seed_equal"] = bool(np.array_equal(a.model.seed_generator.state.numpy(),
                                        b.model.seed_generator.state.numpy()))
ra, rb = a.step(batch(seed=7)), b.step(batch(seed=7))
out["loss"] = [float(ra["total"]), float(rb["total"])]
out["updated"] = [bool(ra["updated"]), bool(rb["updated"])]
out["weights_diff"] = max(float(np.max(np.abs(x - y))) for x, y in
                          zip(a.model.get_weights(), b.model.get_weights()))
print(json.dumps(out))
"""


class ResumeStateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(PROBE)

    def test_accumulation_state_is_restored_mid_update(self):
        self.assertEqual(self.r["micro_step"], [3, 3])
        self.assertTrue(self.r["accumulator_nonzero"])
        self.assertTrue(self.r["accumulators_equal"])

    def test_dropout_seed_state_is_restored(self):
        self.assertTrue(self.r["seed_equal"])
        self.assertEqual(self.r["loss"][0], self.r["loss"][1])

    def test_the_resumed_update_is_the_update_that_would_have_happened(self):
        self.assertEqual(self.r["updated"], [True, True])
        self.assertLessEqual(self.r["weights_diff"], 1e-6)


if __name__ == "__main__":
    unittest.main()
