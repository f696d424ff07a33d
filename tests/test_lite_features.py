"""myxtts.lite.features (numpy, no TensorFlow/librosa) against the code it stands in for: LogMel,
load_reference (librosa's soxr_hq resampling and effects.trim) and TensorFlow's Griffin-Lim;
and proof that importing it loads none of tensorflow, keras or librosa.

    python -m pytest -q tests/test_lite_features.py
"""

import dataclasses
import glob
import os
import subprocess
import sys

import librosa
import numpy as np
import pytest
import soundfile as sf
import soxr

from myxtts.config import XTTSConfig
from myxtts.data.audio import LogMel, mel_filterbank
from myxtts.inference.griffin_lim import GriffinLim
from myxtts.inference.reference_audio import ReferenceTooShortError, load_reference
from myxtts.lite import features
from tests.data_samples import REPO, SAMPLE_DIR

WAVS = sorted(glob.glob(os.path.join(SAMPLE_DIR, "wavs", "*")))  # ogg, flac and wav, 16 kHz
# The configs' features, and one with a window shorter than the FFT (centred in it).
CONFIGS = {"tiny": ("tiny.yaml", {}), "quick": ("quick.yaml", {}),
           "short window": ("quick.yaml", {"win_length": 800, "hop_length": 200})}
SETTING_KEYS = ("sample_rate", "hop_length", "trim_silence", "trim_top_db", "normalize_loudness",
                "target_rms_db", "ref_max_seconds", "ref_min_seconds")


def data_config(name: str):
    path, overrides = CONFIGS[name]
    return dataclasses.replace(XTTSConfig.from_yaml(os.path.join(REPO, "configs", path)).data,
                               **overrides)


def exported_arrays(d):
    """(window, filters) as the export writes them: librosa's periodic Hann of win_length
    centred in n_fft, and mel_filterbank [n_fft//2+1, n_mels]."""
    window = librosa.util.pad_center(
        librosa.filters.get_window("hann", d.win_length, fftbins=True), size=d.n_fft)
    return window, mel_filterbank(d.sample_rate, d.n_fft, d.n_mels, d.fmin, d.fmax)


def settings(d) -> dict:
    return {key: getattr(d, key) for key in SETTING_KEYS}


def speech(index: int = 2) -> np.ndarray:
    return sf.read(WAVS[index], dtype="float32")[0]


@pytest.mark.parametrize("name", list(CONFIGS))
def test_log_mel_equals_logmel(name):
    """Measured max |difference|: 9.5e-7 (float32 rounding) on every config."""
    d = data_config(name)
    window, filters = exported_arrays(d)
    noise = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 0.1
    signals = [speech(i) for i in (0, 2, 4)]  # ogg, flac, wav
    signals += [np.zeros(n, np.float32) for n in (0, 1, d.hop_length, d.sample_rate)]
    signals += [noise[:n] for n in (1, 2, d.hop_length - 1, d.n_fft // 2 + 1, d.n_fft + 3)]
    log_mel = LogMel.from_config(d)
    for samples in signals:
        expected = log_mel(samples[None]).numpy()[0]
        got = features.log_mel(samples, window, filters, d.hop_length, d.mel_floor)
        assert got.dtype == np.float32 and got.shape == expected.shape == (
            1 + len(samples) // d.hop_length, d.n_mels)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)


def test_trim_silence_equals_librosa():
    """Sample for sample: the RMS, its dB and the cut are librosa's float32 operations."""
    rng = np.random.default_rng(1)
    cases = [(speech(i), top_db) for i in range(0, len(WAVS), 6) for top_db in (20, 40, 60)]
    for _ in range(100):  # a burst in silence or in a noise floor, at random levels
        samples = (rng.standard_normal(int(rng.integers(1, 30000))) *
                   10 ** rng.uniform(-7, -3) * rng.integers(0, 2)).astype(np.float32)
        start = int(rng.integers(0, len(samples)))
        end = int(rng.integers(start, len(samples) + 1))
        samples[start:end] += (rng.standard_normal(end - start) * 10 ** rng.uniform(-4, 0))
        cases.append((samples, float(rng.choice([20.0, 35.5, 40.0, 60.0]))))
    cases.append((np.zeros(5000, np.float32), 40.0))
    for samples, top_db in cases:
        expected = librosa.effects.trim(samples, top_db=top_db)[0]
        np.testing.assert_array_equal(features.trim_silence(samples, top_db), expected)


def test_resample_equals_librosa_soxr_hq():
    """Sample for sample, including the lengths where soxr's rounding is one short of
    librosa's ceil."""
    rng = np.random.default_rng(2)
    for length in (1, 3, 100, 1001, 44100):
        samples = rng.standard_normal(length).astype(np.float32)
        for source, target in ((44100, 16000), (16000, 22050), (48000, 22050), (16000, 16000)):
            expected = librosa.resample(samples, orig_sr=source, target_sr=target,
                                        res_type="soxr_hq")
            got = features.resample(samples, source, target)
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)


@pytest.fixture(scope="module")
def reference_files(tmp_path_factory):
    """Real speech in three formats, as stereo at 44.1 and 48 kHz, and padded with silence."""
    folder = tmp_path_factory.mktemp("references")
    samples = speech(2)
    stereo = soxr.resample(samples, 16000, 44100)
    stereo = np.stack([stereo, 0.5 * stereo[::-1]], axis=1)
    sf.write(folder / "stereo.wav", stereo, 44100, subtype="FLOAT")
    sf.write(folder / "stereo.flac", 0.9 * stereo, 48000)
    sf.write(folder / "padded.wav", np.concatenate(
        [np.zeros(9000, np.float32), 0.3 * samples, np.zeros(12000, np.float32)]), 16000)
    return WAVS[:5] + [str(folder / name) for name in ("stereo.wav", "stereo.flac", "padded.wav")]


def test_prepare_reference_equals_load_reference(reference_files):
    """Sample for sample (max |difference| 0) at 16 and 22.05 kHz, trimmed or not, loudness
    normalised or not."""
    quick = data_config("quick")
    for sample_rate in (16000, 22050):
        for trim in (False, True):
            for normalize in (False, True):
                d = dataclasses.replace(quick, sample_rate=sample_rate, trim_silence=trim,
                                        trim_top_db=30.0, normalize_loudness=normalize)
                for path in reference_files:
                    expected = load_reference(path, d)
                    got = features.prepare_reference(path, settings(d))
                    assert got.dtype == np.float32
                    np.testing.assert_array_equal(got, expected)


def test_prepare_reference_refuses_unusable_files(tmp_path):
    (tmp_path / "garbage.wav").write_bytes(b"not audio at all" * 10)
    (tmp_path / "voice.m4a").write_bytes(b"\0" * 100)
    sf.write(tmp_path / "silent.wav", np.full(16000, 1e-4, np.float32), 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 16000)
    sf.write(tmp_path / "nan.wav", np.full(1000, np.nan, np.float32), 16000, subtype="FLOAT")
    problems = {"garbage.wav": "Format not recognised", "voice.m4a": "Convert it to WAV",
                "silent.wav": "no usable samples", "empty.wav": "no usable samples",
                "nan.wav": "no usable samples", "missing.wav": "no such file"}
    d = dataclasses.replace(data_config("quick"), sample_rate=22050, trim_silence=True)
    for name, problem in problems.items():
        with pytest.raises(ValueError, match=problem) as raised:
            features.prepare_reference(str(tmp_path / name), settings(d))
        assert str(tmp_path / name) in str(raised.value)


def test_a_too_short_reference_is_refused_with_the_hosts_message(tmp_path):
    """One rule with the synthesizer, the Python API and the server: less sound after trimming
    than data.ref_min_seconds is refused, in the same words."""
    d = dataclasses.replace(data_config("quick"), trim_silence=True)
    short = str(tmp_path / "short.wav")
    sf.write(short, speech(2)[:int(0.6 * d.ref_min_seconds * d.sample_rate)], d.sample_rate)
    with pytest.raises(ValueError, match="less than the 1.5 s this model's voices") as lite:
        features.prepare_reference(short, settings(d))
    with pytest.raises(ReferenceTooShortError) as host:
        load_reference(short, d)
    assert str(lite.value) == str(host.value)


def _mel_error(d, log_mel, waveform):
    """(mean |log10 mel difference|, spectral convergence ||M - M'|| / ||M|| of the linear
    mels) between log_mel and the waveform's, the waveform advanced by win_length // 2 samples
    to centre its frames where the mel's are (myxtts/inference/griffin_lim.py)."""
    window, filters = exported_arrays(d)
    again = features.log_mel(waveform[d.win_length // 2:], window, filters, d.hop_length,
                             d.mel_floor)[:len(log_mel)]
    return (float(np.mean(np.abs(again - log_mel))),
            float(np.linalg.norm(10.0 ** again - 10.0 ** log_mel) / np.linalg.norm(
                10.0 ** log_mel)))


@pytest.mark.parametrize("name", ["tiny", "quick"])
def test_griffin_lim_rebuilds_the_mel(name):
    """Speech (S003, 5 s), 32 iterations. Measured, numpy / TensorFlow GriffinLim: tiny mean
    |log10 mel difference| 0.048 / 0.049, spectral convergence 0.092 / 0.090; quick 0.078 /
    0.080 and 0.098 / 0.098 (random starting phases alone: 0.22 and 0.29 log10)."""
    d = data_config(name)
    window, filters = exported_arrays(d)
    log_mel = features.log_mel(speech(2), window, filters, d.hop_length, d.mel_floor)
    waveform = features.griffin_lim(log_mel, window, filters, d.n_fft, d.hop_length,
                                    d.win_length)
    assert waveform.dtype == np.float32
    assert waveform.shape == ((len(log_mel) - 1) * d.hop_length + d.win_length,)
    assert np.abs(waveform).max() <= 1.0
    np.testing.assert_array_equal(waveform, features.griffin_lim(
        log_mel, window, filters, d.n_fft, d.hop_length, d.win_length))
    error, convergence = _mel_error(d, log_mel, waveform)
    tf_error, tf_convergence = _mel_error(d, log_mel, GriffinLim.from_config(d)(log_mel).numpy())
    assert error < 0.1 and convergence < 0.12
    assert error < tf_error + 0.01 and convergence < tf_convergence + 0.01


def test_griffin_lim_window_shorter_than_fft():
    """The window's win_length centre is the frame: length and quality as with a full window
    (measured: 0.074 log10, spectral convergence 0.103)."""
    d = data_config("short window")
    window, filters = exported_arrays(d)
    log_mel = features.log_mel(speech(2), window, filters, d.hop_length, d.mel_floor)
    waveform = features.griffin_lim(log_mel, window, filters, d.n_fft, d.hop_length,
                                    d.win_length)
    assert waveform.shape == ((len(log_mel) - 1) * d.hop_length + d.win_length,)
    error, convergence = _mel_error(d, log_mel, waveform)
    assert error < 0.1 and convergence < 0.12


BLOCKER = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "keras", "librosa"):
            raise ImportError(f"{name} is blocked")
        return None

sys.meta_path.insert(0, Blocker())
import myxtts.lite.features
assert not {"tensorflow", "keras", "librosa"} & set(sys.modules)
"""


def test_imports_no_tensorflow_keras_or_librosa():
    result = subprocess.run([sys.executable, "-c", BLOCKER], cwd=REPO, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
