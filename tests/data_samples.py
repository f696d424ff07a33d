"""Datasets for the data tests: the bundled sample (real speech) and temp folders with
deliberately broken files, made with numpy + soundfile at test time (no espeak-ng needed)."""

import os
import shutil

import numpy as np
import soundfile as sf

from myxtts.config import XTTSConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_DIR = os.path.join(REPO, "samples", "ljspeech_sample")
TINY = os.path.join(REPO, "configs", "tiny.yaml")


def tiny_config(**data_overrides) -> XTTSConfig:
    config = XTTSConfig.from_yaml(TINY)
    config.override({f"data.{k}": v for k, v in data_overrides.items()}, source="test")
    return config


def sample_rows():
    """[(id, text, speaker, language, audio path)] of the bundled sample."""
    rows = []
    files = {os.path.splitext(n)[0]: os.path.join(SAMPLE_DIR, "wavs", n)
             for n in os.listdir(os.path.join(SAMPLE_DIR, "wavs"))}
    with open(os.path.join(SAMPLE_DIR, "metadata.csv"), encoding="utf-8") as f:
        for line in f:
            uid, text, _, speaker, language = line.rstrip("\n").split("|")
            rows.append((uid, text, speaker, language, files[uid]))
    return rows


def speech(uid: str = "S001") -> np.ndarray:
    """Real speech from the sample at 16 kHz, float32 mono."""
    path = next(p for i, _, _, _, p in sample_rows() if i == uid)
    data, rate = sf.read(path, dtype="float32")
    assert rate == 16000
    return data


def copy_sample_rows(directory: str, count: int):
    """Copies `count` sample utterances (mixed formats) into directory/wavs; returns metadata
    lines."""
    os.makedirs(os.path.join(directory, "wavs"), exist_ok=True)
    lines = []
    for uid, text, speaker, language, path in sample_rows()[:count]:
        shutil.copy(path, os.path.join(directory, "wavs", os.path.basename(path)))
        lines.append(f"{uid}|{text}|{text}|{speaker}|{language}")
    return lines


def write_metadata(directory: str, lines, name: str = "metadata.csv") -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        for line in lines:
            f.write((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n")
    return path
