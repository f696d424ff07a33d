"""Griffin-Lim (myxtts/inference/griffin_lim.py): a log-mel goes back to audio whose log-mel is
close to the original.

    python -m pytest tests/test_griffin_lim.py -v
"""

import numpy as np

from myxtts.config import XTTSConfig
from myxtts.data.audio import LogMel
from myxtts.inference.griffin_lim import GriffinLim
from tests.data_samples import TINY


def _reconstruction(iterations: int):
    """(audio, its log-mel's level-aligned error on the tone's bins, frames, data config) for a
    gliding harmonic tone of 1 s."""
    d = XTTSConfig.from_yaml(TINY).data
    t = np.arange(d.sample_rate) / d.sample_rate
    f0 = 150 + 100 * t
    wave = 0.3 * sum(np.sin(2 * np.pi * k * np.cumsum(f0) / d.sample_rate) / k
                     for k in range(1, 6))
    log_mel = LogMel.from_config(d)(wave.astype(np.float32)[None])[0]
    target = log_mel.numpy()
    loud = target > np.log10(d.mel_floor) + 2  # bins that carry the tone
    audio = GriffinLim.from_config(d, iterations=iterations)(log_mel).numpy()
    # The output leads the centred feature frames by half a window.
    again = LogMel.from_config(d)(audio[None, d.win_length // 2:])[0].numpy()[:len(target)]
    diff = (again - target)[loud]
    return audio, float(np.mean(np.abs(diff - np.median(diff)))), len(target), d, wave


def test_reconstruction_matches_the_mel():
    audio, error, frames, d, wave = _reconstruction(48)
    _, error_random_phase, _, _, _ = _reconstruction(0)
    assert np.all(np.isfinite(audio))
    # The level the mel describes, not normalised: RMS within 20% of the original's.
    assert abs(np.sqrt(np.mean(audio ** 2)) / np.sqrt(np.mean(wave ** 2)) - 1.0) < 0.2
    assert len(audio) == (frames - 1) * d.hop_length + d.win_length
    # log10 units, level-aligned: within a factor of ~1.6 on the bins that carry the tone and
    # much closer than the random-phase starting point.
    assert error < 0.2
    assert error < 0.6 * error_random_phase
