"""Audio features of the on-device runtime in numpy: the log-mel, speaker-reference preparation
and Griffin-Lim, without TensorFlow, Keras or librosa (imports: numpy, soundfile, soxr and the
standard-library-and-numpy-only myxtts.data.metadata and myxtts.data.audio_math).

What it guarantees (tests/test_lite_features.py measures it against the TensorFlow/librosa code):

- `log_mel(samples, window, filters, hop, mel_floor)` equals
  `myxtts.data.audio.LogMel.from_config(data)(samples[None])[0]` to 1e-4 (measured: 1e-6, the
  float32 rounding of LogMel's projection), given the export's window (librosa's periodic Hann
  of win_length, zero-padded to n_fft in the centre) and filterbank
  (`myxtts.data.audio.mel_filterbank`, [n_fft//2+1, n_mels]).
- `prepare_reference(path, settings)` equals `myxtts.inference.reference_audio.load_reference`
  sample for sample on the files soundfile reads: librosa's soxr_hq resampling and
  `librosa.effects.trim` are redone with soxr and numpy in the same float32 arithmetic.
- `griffin_lim` is myxtts.inference.griffin_lim's algorithm and output length with numpy's
  random starting phases: not the same samples, but a waveform whose log-mel is as close to the
  input's (on speech: mean |log10 difference| 0.05-0.08, as TensorFlow's).
"""

from __future__ import annotations

import os
from typing import Tuple

import numpy as np
import soundfile as sf
import soxr

from myxtts.data import audio_math
from myxtts.data.metadata import FFMPEG_EXTENSIONS

# librosa.effects.trim's defaults: RMS frames of 2048 samples every 512, amplitude floor 1e-5.
TRIM_FRAME, TRIM_HOP, TRIM_POWER_FLOOR = 2048, 512, 1e-5 ** 2


def frames(signal: np.ndarray, frame_length: int, hop_length: int) -> np.ndarray:
    """The view [1 + (len - frame_length) // hop, frame_length] of a signal's frames."""
    return np.lib.stride_tricks.sliding_window_view(signal, frame_length)[::hop_length]


def log_mel(samples: np.ndarray, window: np.ndarray, filters: np.ndarray, hop_length: int,
            mel_floor: float) -> np.ndarray:
    """log10(max(mel, mel_floor)) [1 + len // hop, n_mels] float32 of mono samples: frames
    centred on every hop-th sample (n_fft // 2 zeros padded at both ends, n_fft = len(window)),
    windowed and Fourier-transformed in float64, magnitudes projected by `filters`
    [n_fft//2+1, n_mels]."""
    n_fft = len(window)
    padded = np.pad(np.asarray(samples, np.float32), n_fft // 2)
    spectrum = np.fft.rfft(frames(padded, n_fft, hop_length) * np.asarray(window, np.float64))
    mel = np.abs(spectrum) @ np.asarray(filters, np.float64)
    return np.log10(np.maximum(mel, mel_floor)).astype(np.float32)


def prepare_reference(path: str, settings: dict) -> np.ndarray:
    """Float32 samples of the speaker reference `path` as the speaker encoder reads them:
    downmixed, resampled to settings["sample_rate"], silence trimmed (trim_silence, trim_top_db),
    loudness normalised (normalize_loudness, target_rms_db) and cut to reference_sample_count.
    Raises ValueError naming the file when it cannot be read, holds no usable sound or less
    than settings["ref_min_seconds"] of it (audio_math.reference_problem: the host's rule)."""
    samples, rate = decode(path)
    samples = resample(samples, rate, settings["sample_rate"])
    if settings["trim_silence"] and samples.size and np.all(np.isfinite(samples)):
        samples = trim_silence(samples, settings["trim_top_db"])
    problem = audio_math.reference_problem(samples, settings["sample_rate"], path,
                                           settings["trim_silence"],
                                           settings["ref_min_seconds"], settings["ref_max_seconds"])
    if problem is not None:
        raise ValueError(problem[1])
    if settings["normalize_loudness"]:
        samples = audio_math.normalize_loudness(samples, settings["target_rms_db"])
    return samples[:reference_sample_count(settings)]


def decode(path: str) -> Tuple[np.ndarray, int]:
    """(mono float32 samples, sample rate) of a file soundfile reads; ValueError otherwise."""
    extension = os.path.splitext(path)[1].lower()
    if extension in FFMPEG_EXTENSIONS:
        raise ValueError(
            f"Cannot read the reference audio {path}: {extension} files need ffmpeg, which this "
            f"runtime does not use. Convert it to WAV, FLAC or OGG (for example ffmpeg -i "
            f"{os.path.basename(path)} reference.wav) and pass that file.")
    try:
        data, rate = sf.read(path, dtype="float32", always_2d=True)
    except (OSError, RuntimeError, ValueError) as e:
        problem = str(e).rstrip(".") if os.path.isfile(path) else "there is no such file"
        raise ValueError(
            f"Cannot read the reference audio {path}: {problem}. Pass a readable "
            f"recording of the target speaker (wav, flac, ogg, mp3 or any format libsndfile "
            f"reads).") from None
    return (data.mean(axis=1) if data.shape[1] > 1 else data[:, 0]), rate


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """librosa.resample(samples, res_type="soxr_hq"): soxr's HQ filter, then cut or zero-padded
    to ceil(len * target / source) samples (soxr rounds the length)."""
    if source_rate == target_rate or not samples.size:
        return samples
    resampled = soxr.resample(samples, source_rate, target_rate, quality="HQ")
    length = int(np.ceil(samples.size * (float(target_rate) / source_rate)))
    return np.pad(resampled[:length], (0, max(0, length - resampled.size)))


def trim_silence(samples: np.ndarray, top_db: float) -> np.ndarray:
    """librosa.effects.trim(samples, top_db=top_db)[0]: from the first to the end of the last
    TRIM_HOP-spaced frame whose RMS (over TRIM_FRAME samples, centred, zero-padded) is within
    top_db of the loudest frame's; nothing when no frame is."""
    padded = np.pad(samples, TRIM_FRAME // 2)
    power = np.square(np.sqrt(np.mean(np.square(frames(padded, TRIM_FRAME, TRIM_HOP)), axis=-1)))
    db = 10.0 * np.log10(np.maximum(TRIM_POWER_FLOOR, power)) - \
        10.0 * np.log10(np.maximum(TRIM_POWER_FLOOR, power.max()))
    loud = np.flatnonzero(db > -top_db)
    if not loud.size:
        return samples[:0]
    return samples[loud[0] * TRIM_HOP:min(samples.size, (loud[-1] + 1) * TRIM_HOP)]


def reference_sample_count(settings: dict) -> int:
    """audio_math.reference_sample_count of the manifest's settings."""
    return audio_math.reference_sample_count(settings["sample_rate"], settings["hop_length"],
                                             settings["ref_max_seconds"])


def griffin_lim(log_mel: np.ndarray, window: np.ndarray, filters: np.ndarray, n_fft: int,
                hop_length: int, win_length: int, iterations: int = 32,
                momentum: float = 0.99, first_frame: int = 0) -> np.ndarray:
    """Waveform float32 [(T - 1) * hop + win_length] in [-1, 1] of a log10 mel [T, n_mels], as
    myxtts.inference.griffin_lim: magnitudes through the pseudo-inverse of `filters`, fast
    Griffin-Lim (momentum) from phases drawn by np.random.default_rng(0) (frame i's are row i of
    one table whatever T is; a window that starts at frame `first_frame` of its utterance takes
    rows first_frame..). Frame i starts at sample i * hop (the window's win_length centre of
    `window`), while the features' frame i is centred there: the waveform lags the mel's audio
    by win_length // 2 samples."""
    magnitude = np.maximum(10.0 ** np.asarray(log_mel, np.float32) @ np.linalg.pinv(filters),
                           0.0).astype(np.float32)
    start = (n_fft - win_length) // 2
    analysis = np.asarray(window[start:start + win_length], np.float32)
    synthesis = synthesis_window(analysis, hop_length)
    # Rows first_frame.. of one table: a streamed window starts from its frames' phases.
    phases = np.random.default_rng(0).uniform(
        0.0, 2.0 * np.pi, (first_frame + len(magnitude), magnitude.shape[1]))[first_frame:]
    spec = magnitude * np.exp(1j * phases).astype(np.complex64)
    previous = spec
    for _ in range(iterations):
        rebuilt = stft(istft(spec, synthesis, n_fft, hop_length), analysis, n_fft, hop_length)
        accelerated = rebuilt + momentum * (rebuilt - previous)
        previous = rebuilt
        spec = magnitude * unit_phase(accelerated)
    return np.clip(istft(spec, synthesis, n_fft, hop_length), -1.0, 1.0).astype(np.float32)


def stft(signal: np.ndarray, analysis: np.ndarray, n_fft: int, hop_length: int) -> np.ndarray:
    """Spectra [frames, n_fft//2+1] of the signal's windowed frames that start every hop (the
    frame as long as the window, zero-padded to n_fft at the end, as tf.signal.stft)."""
    return np.fft.rfft(frames(signal, len(analysis), hop_length) * analysis, n_fft)


def istft(spec: np.ndarray, synthesis: np.ndarray, n_fft: int, hop_length: int) -> np.ndarray:
    """tf.signal.inverse_stft: each spectrum's first len(synthesis) samples times the synthesis
    window, overlap-added."""
    return overlap_add(np.fft.irfft(spec, n_fft)[:, :len(synthesis)] * synthesis, hop_length)


def unit_phase(spec: np.ndarray) -> np.ndarray:
    """exp(i * angle(spec)): spec / |spec|, 1 where spec is 0 (5x faster than the complex exp)."""
    size = np.abs(spec)
    return np.where(size > 0, spec / np.maximum(size, np.finfo(size.dtype).tiny), 1)


def synthesis_window(window: np.ndarray, hop_length: int) -> np.ndarray:
    """tf.signal.inverse_stft_window_fn: the window over the sum of the squared windows that
    overlap each of its samples (edges of a signal are not corrected)."""
    overlaps = -(-len(window) // hop_length)
    squares = np.pad(np.square(window), (0, overlaps * hop_length - len(window)))
    return window / np.tile(squares.reshape(overlaps, hop_length).sum(axis=0), overlaps)[
        :len(window)]


def overlap_add(frame_samples: np.ndarray, hop_length: int) -> np.ndarray:
    """Frames [T, length] laid every hop_length samples and summed: (T - 1) * hop + length."""
    count, length = frame_samples.shape
    overlaps = -(-length // hop_length)
    blocks = np.pad(frame_samples, ((0, 0), (0, overlaps * hop_length - length))).reshape(
        count, overlaps, hop_length)
    out = np.zeros((count + overlaps - 1, hop_length), frame_samples.dtype)
    for j in range(overlaps):
        out[j:j + count] += blocks[:, j]
    return out.reshape(-1)[:(count - 1) * hop_length + length if count else 0]
