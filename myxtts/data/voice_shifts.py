"""More training voices from the ones a corpus has: `data.voice_shifts` and `data.voice_warp`.

Each factor f adds a copy of every training speaker whose recordings are resampled as if played
f times faster: pitch, formants and tempo all scale by f, which is a different voice (a
"speed perturbation" of the speaker, not of the text). The copy is a speaker of its own,
`<speaker>~<f>`, whose references are its own shifted recordings, so the model learns to take
the voice from the reference over many more voices than the corpus holds. Validation rows are
never shifted. A shifted copy that would be longer than data.max_audio_seconds is left out.

`data.voice_warp` w warps each training item's log-mels along frequency instead, by a factor a
drawn per item from WARP_STEPS values in [1 - w, 1 + w], the same for its target and its
reference: the mel band at frequency f takes the value at f / a (vocal tract length
perturbation). Formants and pitch scale by a and tempo does not, so batches hold a continuum of
voices between and beyond the corpus's. With `data.voice_warp_envelope` only the spectral
envelope (the log-mel smoothed along frequency over ENVELOPE_BANDS bands) is warped and what
the smoothing leaves (the harmonics) stays where it is: formants move, pitch does not, as
between synthesiser variants that set them independently. Either way a warp is one linear map
of each log-mel frame, which the input pipeline applies with `warp_matrices` on the data device
(InputPipeline._featurize_batch).

This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
from typing import List, Sequence

import numpy as np
import soxr

from myxtts.data.validation import Item


WARP_STEPS = 33  # warp factors, evenly spaced over [1 - w, 1 + w]
ENVELOPE_BANDS = 9  # the Hann window, in mel bands, that smooths a frame into its envelope


def warp_matrices(data_config) -> np.ndarray:
    """[WARP_STEPS, n_mels, n_mels] float32: log-mel rows [T, n_mels] @ matrix k = the rows
    warped by the k-th factor of [1 - voice_warp, 1 + voice_warp] (the middle one is 1: the
    identity). Each band's value is interpolated between the two bands whose centre
    frequencies (Slaney scale, as the features') surround f / a; beyond the first or last
    centre it takes that band's value. With data.voice_warp_envelope the matrix is
    S @ W + (I - S): the envelope (rows @ S, envelope_smoother) warped, plus the rest
    unwarped. Columns sum to 1, so padding frames (constant rows) stay padding."""
    import librosa  # pylint: disable=import-outside-toplevel  (only this function needs it)
    d = data_config
    n = d.n_mels
    centres = librosa.mel_frequencies(n + 2, fmin=d.fmin, fmax=d.fmax, htk=False)[1:-1]
    factors = np.linspace(1.0 - d.voice_warp, 1.0 + d.voice_warp, WARP_STEPS)
    matrices = np.zeros([WARP_STEPS, n, n], np.float64)
    columns = np.arange(n)
    for k, factor in enumerate(factors):
        position = np.interp(centres / factor, centres, np.arange(n, dtype=np.float64))
        low = np.floor(position).astype(np.int64)
        high = np.minimum(low + 1, n - 1)
        fraction = position - low
        np.add.at(matrices[k], (low, columns), 1.0 - fraction)
        np.add.at(matrices[k], (high, columns), fraction)
    if d.voice_warp_envelope:
        smoother = envelope_smoother(n)
        matrices = smoother @ matrices + (np.eye(n) - smoother)
    return matrices.astype(np.float32)


def envelope_smoother(n_mels: int) -> np.ndarray:
    """[n_mels, n_mels] float64: rows [T, n_mels] @ matrix = each frame smoothed along frequency
    by an ENVELOPE_BANDS-band Hann window, the window cut at the edges and renormalised (each
    column sums to 1)."""
    window = np.hanning(ENVELOPE_BANDS + 2)[1:-1]
    half = ENVELOPE_BANDS // 2
    matrix = np.zeros([n_mels, n_mels], np.float64)
    for out_band in range(n_mels):
        for offset, weight in zip(range(-half, half + 1), window):
            if 0 <= out_band + offset < n_mels:
                matrix[out_band + offset, out_band] = weight
    return matrix / matrix.sum(axis=0, keepdims=True)


def shifted_length(num_samples: int, factor: float) -> int:
    return max(1, int(round(num_samples / factor)))


def shift_voice(samples: np.ndarray, factor: float, length: int) -> np.ndarray:
    """`samples` played `factor` times faster at the same rate, cut or padded to `length`
    samples: float32 [length]."""
    out = soxr.resample(np.asarray(samples, np.float32), factor, 1.0, quality="HQ")
    return np.pad(out[:length], (0, max(0, length - len(out)))).astype(np.float32)


def shifted_speaker(speaker: str, factor: float) -> str:
    return f"{speaker}~{factor:g}"


def shifted_items(items: Sequence[Item], factors: Sequence[float], data_config) -> List[Item]:
    """The voice-shifted copies of `items` (training items), one per item and factor that fits
    data.max_audio_seconds."""
    limit = data_config.max_audio_seconds * data_config.sample_rate
    out = []
    for factor in factors:
        for item in items:
            length = shifted_length(item.num_samples, factor)
            if length <= limit:
                out.append(dataclasses.replace(
                    item, id=f"{item.id}~{factor:g}", speaker=shifted_speaker(item.speaker, factor),
                    num_samples=length, voice_shift=float(factor)))
    return out
