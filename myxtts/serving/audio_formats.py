"""The audio formats of /v1/audio/speech: float32 samples → the bytes of a response.

wav (16-bit PCM), pcm (raw 16-bit little-endian mono, no header; the rate is in the response's
X-Sample-Rate header), flac, mp3 and opus (in Ogg): each that the installed libsndfile writes
(soundfile.available_subtypes; libsndfile 1.1+ writes MP3, 1.0.29+ Opus). Opus takes only
8, 12, 16, 24 or 48 kHz, so other model rates are resampled to 48 kHz for it. Streamed responses
are pcm, or wav as one header of unknown length then PCM (myxtts.inference.wav_stream). No
TensorFlow.
"""

from __future__ import annotations

import io
from typing import Dict, NamedTuple, Optional

import librosa
import numpy as np
import soundfile as sf

from myxtts.inference.wav_stream import pcm16


class AudioFormat(NamedTuple):
    media_type: str
    container: Optional[str]  # soundfile format (None: raw PCM)
    subtype: Optional[str]


_ALL = {
    "wav": AudioFormat("audio/wav", "WAV", "PCM_16"),
    "pcm": AudioFormat("audio/pcm", None, None),
    "flac": AudioFormat("audio/flac", "FLAC", "PCM_16"),
    "mp3": AudioFormat("audio/mpeg", "MP3", "MPEG_LAYER_III"),
    "opus": AudioFormat("audio/ogg", "OGG", "OPUS"),
}
STREAMED = ("pcm", "wav")
OPUS_RATES = (8000, 12000, 16000, 24000, 48000)


def _writable(fmt: AudioFormat) -> bool:
    return fmt.container is None or (fmt.container in sf.available_formats()
                                     and fmt.subtype in sf.available_subtypes(fmt.container))


FORMATS: Dict[str, AudioFormat] = {name: fmt for name, fmt in _ALL.items() if _writable(fmt)}


def encode(samples: np.ndarray, sample_rate: int, name: str) -> bytes:
    """The whole `samples` (float32 mono in [-1, 1]) in format `name` (a key of FORMATS)."""
    fmt = FORMATS[name]
    if fmt.container is None:
        return pcm16(samples)
    samples = np.clip(np.asarray(samples, np.float32), -1.0, 1.0)
    if fmt.subtype == "OPUS" and sample_rate not in OPUS_RATES:
        samples = librosa.resample(samples, orig_sr=sample_rate, target_sr=48000,
                                   res_type="soxr_hq")
        sample_rate = 48000
    buffer = io.BytesIO()
    sf.write(buffer, samples, sample_rate, format=fmt.container, subtype=fmt.subtype)
    return buffer.getvalue()
