"""The models myxtts-serve serves: a SavedModel (myxtts.inference.exported_model.ExportedModel,
TensorFlow) or an on-device LiteRT/ONNX export (LiteModel here, no TensorFlow), by what the
folder holds.

    model = load_model("models/myxtts")         # SavedModel versions: ExportedModel
    model = load_model("models/myxtts-tflite")  # manifest.json versions: LiteModel

What the server reads of either: `config`, `path`, `sample_rate`, `hop_length`, `checkpoint`,
`vocoder_name`, `describe()`, `sentences(text, language)`, `require_fingerprint()`,
`decoder_fingerprint` and `speaks_adapted` (adapted voices), `voice(path, name)` (a
voices.Voice of a reference recording), `voice_inputs(voice)` and `runtime()`, a decode
backend and a vocoder for one engine worker (myxtts.serving.engine).
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import numpy as np

from myxtts.inference.reference_audio import load_reference
from myxtts.inference.voices import Voice
from myxtts.lite.parts import ExportError, manifest_folder
from myxtts.lite.synthesizer import LiteSynthesizer
from myxtts.run_directory import shown_path, step_of


def load_model(path: str):
    """An on-device export's LiteModel when `path` (or its newest version) holds an on-device
    manifest, else the SavedModel export's ExportedModel (TensorFlow imported only then)."""
    try:
        manifest_folder(path)
    except ExportError:
        # pylint: disable=import-outside-toplevel  (TensorFlow only for a SavedModel)
        from myxtts.inference.exported_model import ExportedModel
        return ExportedModel(path)
    return LiteModel(path)


class LiteModel(LiteSynthesizer):
    """An on-device export with what the server reads (see the module docstring). Its parts take
    at most the export's decode_rows sentences a batch (LiteDecoder.max_rows: 1 unless exported
    with --decode-rows), and the engine's workers each have parts of their own (`runtime`). Adapted voices are not
    spoken: the parts hold the model's own postnet."""

    decoder_fingerprint: Optional[str] = None
    speaks_adapted = False

    def __init__(self, path: str, threads: int = 1):
        super().__init__(path, threads)
        self.path = self.folder
        self.checkpoint = self.manifest["checkpoint"]
        self.vocoder_name = self.manifest["vocoder"]

    def describe(self) -> str:
        """E.g. "version 1 of models/myxtts-tflite (tflite, int8): runs/tiny/ckpt-200 (step
        200), vocoder Griffin-Lim"."""
        step = step_of(self.checkpoint)
        trained = f" (step {step:,})" if step is not None else ""
        vocoder = ("Griffin-Lim" if self.vocoder_name == "griffin-lim"
                   else shown_path(self.vocoder_name))
        return (f"version {os.path.basename(self.folder)} of {os.path.dirname(self.folder)} "
                f"({self.manifest['runtime']}, {self.manifest['quantize']}): "
                f"{shown_path(self.checkpoint)}{trained}, vocoder {vocoder}")

    def require_fingerprint(self) -> str:
        return self.manifest["voice_fingerprint"]

    def voice(self, path: str, name: Optional[str] = None) -> Voice:
        """The voice of the reference recording `path` (named `name`), prepared as the
        SavedModel server prepares it (reference_audio.load_reference: ReferenceAudioError for
        an unusable recording)."""
        samples = load_reference(path, self.config.data, name)
        return Voice(self.latents_of_samples(samples)[0], self.require_fingerprint(),
                     (os.path.basename(name or path),), self.checkpoint)

    def voice_inputs(self, voice: Voice) -> Tuple[np.ndarray, None]:
        """(latents [L, d], None); VoiceMismatchError for another model's voice or an adapted
        one."""
        return voice.latents_for(self.require_fingerprint(), self.checkpoint), None
