"""A training corpus from long recordings and their transcripts (no TensorFlow).

A folder of recordings, each with its transcript beside it (`chapter01.flac` + `chapter01.txt`,
UTF-8, any line breaks), becomes an LJSpeech-style folder: `wavs/<name>_<k>.wav` (16-bit PCM at
data.sample_rate) and `metadata.csv` rows `id|text|text|speaker|language`. Each recording is cut
by `myxtts.data.splitting` at pauses where its punctuation is heard (with espeak-ng's voice of the
language when it has one: `myxtts.data.transcript_alignment`), into pieces of
data.min_audio_seconds..data.max_audio_seconds; stretches that cannot be cut that fine are left
out and counted. The corpus is then trained on like any other (`train_main.py --train-data`).
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import List, Optional

import numpy as np
import soundfile as sf

from myxtts.atomic_write import atomic_write
from myxtts.data import audio_io
from myxtts.data.splitting import Piece, split_utterance, voiced_intervals
from myxtts.data.transcript_alignment import espeak_voice, hear_punctuation
from myxtts.errors import MyXTTSError

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus")


class CorpusError(MyXTTSError, ValueError):
    """Recordings that cannot become a corpus; the message says which and why."""


@dataclasses.dataclass
class RecordingResult:
    """What became of one recording."""

    name: str
    seconds: float
    pieces: List[Piece]
    reason: str  # why nothing was cut, when pieces is empty
    sample_rate: int

    @property
    def kept_seconds(self) -> float:
        return sum(p.length for p in self.pieces) / self.sample_rate


def find_recordings(folder: str) -> List[tuple]:
    """(audio path, transcript path) of every recording in `folder` that has a transcript."""
    if not os.path.isdir(folder):
        raise CorpusError(f"The recordings folder {folder} does not exist.")
    pairs = []
    for path in sorted(glob.glob(os.path.join(folder, "*"))):
        stem, extension = os.path.splitext(path)
        if extension.lower() in AUDIO_EXTENSIONS and os.path.isfile(stem + ".txt"):
            pairs.append((path, stem + ".txt"))
    if not pairs:
        raise CorpusError(f"{folder} holds no recording with a transcript beside it (e.g. "
                          f"chapter01.flac and chapter01.txt).")
    return pairs


def split_recording(samples: np.ndarray, text: str, data_config, language: str):
    """(pieces, reason) of one recording at data_config's sample rate."""
    d = data_config
    voiced = voiced_intervals(samples, d.sample_rate, d.trim_top_db)
    heard = hear_punctuation(text, samples, d.sample_rate, language) if len(voiced) > 1 else None
    return split_utterance(text, voiced, len(samples), d.sample_rate, d.min_audio_seconds,
                           d.max_audio_seconds, heard)


def build_corpus(recordings: str, out: str, data_config, language: str,
                 speaker: Optional[str] = None) -> List[RecordingResult]:
    """Writes the corpus of `recordings` into `out` (module docstring); `speaker` defaults to
    the recordings folder's name. Refuses an `out` that already holds a metadata.csv."""
    d = data_config
    if os.path.exists(os.path.join(out, "metadata.csv")):
        raise CorpusError(f"{out} already holds a metadata.csv; name a new folder for the corpus "
                          f"(nothing was changed).")
    if language not in d.languages:
        raise CorpusError(f"The language {language!r} is not in data.languages "
                          f"{list(d.languages)} of the config the corpus is made for.")
    speaker = speaker or os.path.basename(os.path.normpath(recordings))
    pairs = find_recordings(recordings)
    os.makedirs(os.path.join(out, "wavs"), exist_ok=True)
    rows, results = [], []
    for audio_path, text_path in pairs:
        name = os.path.splitext(os.path.basename(audio_path))[0].replace("|", "_")
        try:
            with open(text_path, encoding="utf-8") as f:
                text = " ".join(f.read().split()).replace("|", ",")
            samples = audio_io.decode(audio_path, d.sample_rate).samples
        except (OSError, UnicodeDecodeError, RuntimeError, ValueError) as e:
            # One unreadable recording or transcript is reported, not fatal to the others.
            results.append(RecordingResult(name, 0.0, [], f"cannot read {audio_path} or "
                                           f"{text_path}: {e}", d.sample_rate))
            continue
        pieces, reason = split_recording(samples, text, d, language)
        for k, piece in enumerate(pieces, start=1):
            piece_id = f"{name}_{k:04d}"
            sf.write(os.path.join(out, "wavs", f"{piece_id}.wav"),
                     samples[piece.offset:piece.offset + piece.length], d.sample_rate,
                     subtype="PCM_16")
            rows.append(f"{piece_id}|{piece.text}|{piece.text}|{speaker}|{language}")
        results.append(RecordingResult(name, len(samples) / d.sample_rate, pieces, reason,
                                       d.sample_rate))
    if not rows:
        raise CorpusError("No recording could be cut: " + "; ".join(
            f"{r.name}: {r.reason}" for r in results))
    atomic_write(os.path.join(out, "metadata.csv"), "\n".join(rows) + "\n")
    return results


def aligner_note(language: str) -> str:
    """How punctuation is placed for `language`, for the command's report."""
    voice = espeak_voice(language)
    return (f"punctuation heard with espeak-ng's {voice!r} voice" if voice else
            "espeak-ng cannot speak this language: punctuation placed by the speaking rate "
            "alone, which cuts only short recordings (apt-get install espeak-ng)")
