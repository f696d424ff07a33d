"""librosa's log-mel, the reference myxtts.data.audio.LogMel must match (tests/test_data_audio.py
checks the parity, benchmarks/bench_mel.py the speed)."""

import librosa
import numpy as np


def librosa_log_mel(samples: np.ndarray, data_config, dtype=np.float32) -> np.ndarray:
    """The reference implementation [frames, n_mels] the tf.signal version must match."""
    d = data_config
    mel = librosa.feature.melspectrogram(
        y=samples.astype(dtype), sr=d.sample_rate, n_fft=d.n_fft, hop_length=d.hop_length,
        win_length=d.win_length, window="hann", center=True, pad_mode="constant", power=1.0,
        n_mels=d.n_mels, fmin=d.fmin, fmax=d.fmax, htk=False, norm="slaney")
    return np.log10(np.maximum(mel, d.mel_floor)).T
