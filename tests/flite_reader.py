"""One tiny model trained with the real CLI on three flite voices, shared by the tests that judge
a trained model (tests/test_learns_to_clone.py, tests/test_learns_to_read.py): trained once per
test run, on first use, and removed when the run ends. Needs flite (`available()`); the cloning
test also needs the speaker judge (`judge_missing()`)."""

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from typing import List, NamedTuple

import soundfile as sf
import soxr

from tests.data_samples import sample_rows, write_metadata
from tests.device_harness import train_tiny_reader

STEPS = 900
VOICES = ("slt", "rms", "awb")  # flite: a woman, an American man, a Scottish man


class FliteReader(NamedTuple):
    data: str  # the training corpus: every voice reads every English sentence of the sample
    lines: List[str]  # its metadata lines, "uid|text|text|voice", uid = f"{voice}_{number:02d}"
    run_dir: str  # the trained model's checkpoint directory


def available() -> bool:
    return shutil.which("flite") is not None


@functools.lru_cache(maxsize=None)
def judge_missing() -> str:
    """Why the speaker judge (Resemblyzer) cannot be loaded; empty when it can."""
    # pylint: disable=import-outside-toplevel
    from myxtts.evaluation.speaker_judge import load_speaker_judge
    judge, why_not = load_speaker_judge("auto")
    return "" if judge else why_not


def cloning_test_runs() -> bool:
    """Whether tests/test_learns_to_clone.py can run (flite and the judge are here)."""
    return available() and not judge_missing()


def _speak(voice: str, text: str, path: str) -> None:
    subprocess.run(["flite", "-voice", voice, "-t", text, "-o", path], check=True)
    samples, rate = sf.read(path, dtype="float32")
    sf.write(path, soxr.resample(samples, rate, 16000), 16000)


@functools.lru_cache(maxsize=None)
def trained() -> FliteReader:
    """The corpus and the model trained STEPS steps on it (the first call trains)."""
    tmp = tempfile.mkdtemp(prefix="myxtts-flite-reader-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    texts = [text for _, text, _, language, _ in sample_rows() if language == "en"]
    data = os.path.join(tmp, "data")
    os.makedirs(os.path.join(data, "wavs"))
    lines = []
    for voice in VOICES:
        for number, text in enumerate(texts):
            uid = f"{voice}_{number:02d}"
            _speak(voice, text, os.path.join(data, "wavs", f"{uid}.wav"))
            lines.append(f"{uid}|{text}|{text}|{voice}")
    write_metadata(data, lines)
    run_dir = train_tiny_reader(tmp, data, STEPS, languages=["en"], ref_min_seconds=1.5,
                                ref_max_seconds=3.0)
    return FliteReader(data, lines, run_dir)


def copy_rows(reader: FliteReader, directory: str, lines) -> None:
    """A folder of its own holding `lines` of the corpus (their audio and metadata.csv)."""
    os.makedirs(os.path.join(directory, "wavs"))
    for line in lines:
        uid = line.split("|")[0]
        shutil.copy(os.path.join(reader.data, "wavs", f"{uid}.wav"),
                    os.path.join(directory, "wavs"))
    write_metadata(directory, lines)
