"""Where a recording says each punctuation mark of its transcript (no TensorFlow).

espeak-ng speaks the transcript, one piece per punctuation mark (`splitting.punctuation_marks`),
so the time of every mark in the synthetic speech is known; dynamic time warping of the two
log-mel spectrograms (each normalised per band over its file) maps those times onto the
recording. This is how audiobook aligners without a recogniser work, and it needs only a voice of
the language, not one like the speaker (measured on real voice acting in docs/data.md, "Long
recordings": `benchmarks/bench_long_recordings.py`).
`myxtts.data.splitting` pairs the marks with pauses near where they were heard.

`hear_punctuation` returns None when espeak-ng is not installed or has no voice for the
language; splitting then falls back to the speaking rate alone, which is reliable for a few
sentences but not for a chapter.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from typing import List, Optional

import librosa
import numpy as np
import soundfile as sf

from myxtts.data.splitting import punctuation_marks

HOP_SECONDS = 0.02
N_MELS = 40
# The warping path may stray this far from the diagonal: the larger of BAND_SECONDS and
# BAND_SHARE of the recording.
BAND_SECONDS = 30.0
BAND_SHARE = 0.15
# espeak-ng voice names where they differ from the language code.
ESPEAK_VOICES = {"en": "en-us"}


@functools.lru_cache(maxsize=None)
def espeak_voice(language: str) -> Optional[str]:
    """The espeak-ng voice for `language`, or None (no espeak-ng, or no such voice)."""
    if shutil.which("espeak-ng") is None:
        return None
    voice = ESPEAK_VOICES.get(language, language)
    listed = subprocess.run(["espeak-ng", f"--voices={voice}"], capture_output=True, text=True,
                            check=False).stdout.splitlines()[1:]
    return voice if any(line.split()[1:2] == [voice] for line in listed) else None


def _speak(text: str, voice: str, sample_rate: int, folder: str) -> np.ndarray:
    path = os.path.join(folder, "piece.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-w", path, text], check=True,
                   capture_output=True)
    samples, rate = sf.read(path, dtype="float32")
    return librosa.resample(samples, orig_sr=rate, target_sr=sample_rate) if rate != sample_rate \
        else samples


def _features(samples: np.ndarray, sample_rate: int) -> np.ndarray:
    """Log-mel frames [frames, N_MELS], each band normalised to zero mean, unit variance."""
    hop = int(HOP_SECONDS * sample_rate)
    mel = librosa.feature.melspectrogram(y=samples, sr=sample_rate, n_fft=4 * hop,
                                         hop_length=hop, n_mels=N_MELS)
    mel = np.log(mel + 1e-6)
    mel = (mel - mel.mean(1, keepdims=True)) / (mel.std(1, keepdims=True) + 1e-6)
    return mel.T


def banded_dtw_path(a: np.ndarray, b: np.ndarray, band: int) -> List[List[int]]:
    """For each frame of `a` [n, d], the frames of `b` [m, d] the minimal-cost warping path
    (Euclidean frame distance; steps diagonal, down, right) pairs with it, the path kept within
    `band` frames of the straight line from (0, 0) to (n-1, m-1)."""
    n, m = len(a), len(b)
    centre = np.round(np.arange(n) * (m - 1) / max(n - 1, 1)).astype(int)
    low = np.clip(centre - band, 0, m - 1)
    high = np.clip(centre + band + 1, 1, m)
    rows = []
    previous, previous_low = None, 0
    for i in range(n):
        columns = np.arange(low[i], high[i])
        cost = np.sqrt(((a[i][None, :] - b[columns]) ** 2).sum(1))
        if previous is None:
            into = np.full(len(columns), np.inf)
            into[0] = 0.0 if low[i] == 0 else np.inf
        else:
            def above(j):
                out = np.full(len(j), np.inf)
                ok = (j >= previous_low) & (j < previous_low + len(previous))
                out[ok] = previous[j[ok] - previous_low]
                return out
            into = np.minimum(above(columns), above(columns - 1))
        # Moves right inside the row: total[k] = min(into[k], total[k-1]) + cost[k].
        running = np.cumsum(cost)
        total = running + np.minimum.accumulate(into + cost - running)
        rows.append(total)
        previous, previous_low = total, low[i]

    def at(i, j):
        return rows[i][j - low[i]] if low[i] <= j < high[i] else np.inf

    pairs = [[] for _ in range(n)]
    i, j = n - 1, m - 1
    pairs[i].append(j)
    while i > 0 or j > 0:
        moves = [(at(i - 1, j - 1), i - 1, j - 1)] if i and j else []
        moves += [(at(i - 1, j), i - 1, j)] if i else []
        moves += [(at(i, j - 1), i, j - 1)] if j else []
        _, i, j = min(moves)
        pairs[i].append(j)
    return pairs


def hear_punctuation(text: str, samples: np.ndarray, sample_rate: int,
                     language: str) -> Optional[List[float]]:
    """For each of `punctuation_marks(text)`, the sample of `samples` where the recording says
    it; None when espeak-ng cannot speak `language`."""
    voice = espeak_voice(language)
    if voice is None:
        return None
    marks = punctuation_marks(text)
    pieces = [text[a:b].strip() for a, b in zip([0, *marks], [*marks, len(text)])]
    spoken: List[np.ndarray] = []
    ends: List[int] = []
    with tempfile.TemporaryDirectory() as folder:
        for piece in pieces:
            spoken.append(_speak(piece, voice, sample_rate, folder) if re.search(r"\w", piece)
                          else np.zeros(0, np.float32))
            ends.append(sum(len(s) for s in spoken))
    synthetic = _features(np.concatenate(spoken), sample_rate)
    recorded = _features(np.asarray(samples, np.float32), sample_rate)
    band = max(int(BAND_SECONDS / HOP_SECONDS), int(BAND_SHARE * len(recorded)))
    path = banded_dtw_path(synthetic, recorded, band)
    hop = int(HOP_SECONDS * sample_rate)
    return [float(np.median(path[min(end // hop, len(path) - 1)]) * hop) for end in ends[:-1]]

