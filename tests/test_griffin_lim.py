"""Griffin-Lim (myxtts/inference/griffin_lim.py): a log-mel goes back to audio whose log-mel is
close to the original.

    python -m pytest tests/test_griffin_lim.py -v
"""

import unittest

from tests.device_harness import run_probe

PROBE = """
import numpy as np
from myxtts.config import XTTSConfig
from myxtts.data.audio import LogMel
from myxtts.inference.griffin_lim import GriffinLim
d = XTTSConfig.from_yaml("configs/tiny.yaml").data
t = np.arange(d.sample_rate) / d.sample_rate
f0 = 150 + 100 * t  # a gliding harmonic tone, 1 s
wave = sum(np.sin(2 * np.pi * k * np.cumsum(f0) / d.sample_rate) / k for k in range(1, 6))
wave = (0.3 * wave).astype(np.float32)
log_mel = LogMel.from_config(d)(wave[None])[0]
target = log_mel.numpy()
loud = target > np.log10(d.mel_floor) + 2  # bins that carry the tone


def error(iterations):
    audio = GriffinLim.from_config(d, iterations=iterations)(log_mel).numpy()
    # The output leads the centred feature frames by half a window.
    again = LogMel.from_config(d)(audio[None, d.win_length // 2:])[0].numpy()[:len(target)]
    diff = (again - target)[loud]
    return audio, float(np.mean(np.abs(diff - np.median(diff))))  # output is peak-normalised


audio, err = error(48)
_, err_random_phase = error(0)
print(json.dumps({"samples": len(audio), "frames": int(log_mel.shape[0]), "hop": d.hop_length,
                  "win": d.win_length,
                  "finite": bool(np.all(np.isfinite(audio))),
                  "peak": float(np.max(np.abs(audio))), "error": err,
                  "error_random_phase": err_random_phase}))
"""


class GriffinLimTest(unittest.TestCase):
    def test_reconstruction_matches_the_mel(self):
        r = run_probe(PROBE)
        self.assertTrue(r["finite"])
        self.assertAlmostEqual(r["peak"], 0.95, places=3)
        self.assertEqual(r["samples"], (r["frames"] - 1) * r["hop"] + r["win"])
        # log10 units, level-aligned: within a factor of ~1.6 on the bins that carry the tone
        # and much closer than the random-phase starting point.
        self.assertLess(r["error"], 0.2, r)
        self.assertLess(r["error"], 0.6 * r["error_random_phase"], r)


if __name__ == "__main__":
    unittest.main()
