"""The parts of an on-device export (myxtts.exporters.edge) as callables on numpy arrays:
`part(**inputs) -> {output name: array}`, run by LiteRT (ai-edge-litert's Interpreter, or the
older tflite-runtime) or ONNX Runtime. Imports neither until a part is loaded, and no
TensorFlow ever.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Dict, Optional

import numpy as np

from myxtts.errors import MyXTTSError

MANIFEST = "manifest.json"
# What LiteRT's C++ logger writes to standard error when a part first allocates its tensors.
XNNPACK_NOTICE = b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU."


class ExportError(MyXTTSError, ValueError):
    """A folder that is not an on-device export, or a runtime that is not installed."""


def manifest_folder(path: str) -> str:
    """`path` itself when it holds manifest.json, else its highest numbered version that does."""
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return path
    versions = [int(name) for name in (os.listdir(path) if os.path.isdir(path) else ())
                if name.isdigit() and os.path.isfile(os.path.join(path, name, MANIFEST))]
    if not versions:
        raise ExportError(f"{path} holds no {MANIFEST}: pass the folder `myxtts-export --format "
                          f"tflite|onnx` wrote (or one of its version folders).")
    return os.path.join(path, str(max(versions)))


FORMAT_VERSION = 1  # myxtts.exporters.edge.FORMAT_VERSION this runtime reads


def read_manifest(folder: str) -> dict:
    """The manifest of export `folder`; ExportError for one that is not a myxtts on-device
    manifest, comes from another format version, or names part files that are missing."""
    path = os.path.join(folder, MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise ExportError(f"Cannot read {path}: {e}. Export the model again.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != "myxtts-edge":
        raise ExportError(f"{path} is not a myxtts on-device export manifest: pass the folder "
                          f"`myxtts-export --format tflite|onnx` wrote.")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ExportError(f"{path} has format version {version}; this myxtts reads version "
                          f"{FORMAT_VERSION}. Export the checkpoint again with this myxtts (or "
                          f"run the export with the myxtts that wrote it).")
    missing = [info["file"] for info in manifest["parts"].values()
               if not os.path.isfile(os.path.join(folder, info["file"]))]
    missing += [name for name in ("config.yaml", "vocab.json", "mel_filters.npy", "stft_window.npy")
                if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise ExportError(f"{folder} lacks {', '.join(missing)}, which its {MANIFEST} needs: "
                          f"copy the whole export folder, or export the checkpoint again.")
    return manifest


def _tflite_interpreter(path: str, threads: int):
    try:
        from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
    except ImportError:
        try:
            from tflite_runtime.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ExportError("Running a LiteRT export needs the LiteRT runtime: pip install "
                              "ai-edge-litert (or tflite-runtime).") from None
    interpreter = Interpreter(model_path=path, num_threads=threads)
    _allocate_quietly(interpreter)
    return interpreter


def _allocate_quietly(interpreter) -> None:
    """interpreter.allocate_tensors() without LiteRT's XNNPACK_NOTICE, which its C++ code
    prints to file descriptor 2 once per interpreter; anything else it prints is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            interpreter.allocate_tensors()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            other = [line for line in caught.read().splitlines(keepends=True)
                     if line.strip() != XNNPACK_NOTICE]
            if other:
                os.write(2, b"".join(other))


class TFLitePart:
    """A LiteRT part; `outputs` maps its signature's output names to the manifest's."""

    def __init__(self, path: str, threads: int, outputs: Dict[str, str]):
        # Kept: a signature runner does not keep its interpreter alive, and a collected
        # interpreter frees the model the runner still reads (memory errors, wrong results).
        self.interpreter = _tflite_interpreter(path, threads)
        self.outputs = outputs
        # Made at the first call, so the decode_steps part, which myxtts.lite.resident drives
        # through the interpreter's own tensors (no runner call, which would resize and
        # re-allocate them every step), never holds one.
        self._runner = None

    def details(self):
        """(inputs, outputs): the signature's tensor details by name, outputs by the
        manifest's names; no runner is kept."""
        runner = self.interpreter.get_signature_runner()
        return runner.get_input_details(), {self.outputs[name]: detail for name, detail
                                            in runner.get_output_details().items()}

    def __call__(self, **inputs) -> Dict[str, np.ndarray]:
        if self._runner is None:
            self._runner = self.interpreter.get_signature_runner()
        return {self.outputs[key]: value for key, value in self._runner(**inputs).items()}


class OnnxPart:
    """An ONNX Runtime part; its inputs are the manifest's names with ':0'."""

    def __init__(self, path: str, threads: int, outputs: Dict[str, str]):
        try:
            import onnxruntime  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ExportError("Running an ONNX export needs ONNX Runtime: pip install "
                              "onnxruntime.") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(path, options,
                                                    providers=["CPUExecutionProvider"])
        self.outputs = outputs

    def __call__(self, **inputs) -> Dict[str, np.ndarray]:
        names = list(self.outputs)
        values = self.session.run(names, {f"{k}:0": v for k, v in inputs.items()})
        return {self.outputs[name]: value for name, value in zip(names, values)}


def load_parts(folder: str, manifest: dict, threads: int = 1,
               only: Optional[set] = None) -> Dict[str, object]:
    load = {"tflite": TFLitePart, "onnx": OnnxPart}[manifest["runtime"]]
    return {name: load(os.path.join(folder, info["file"]), threads,
                       {tensor["runtime_name"]: tensor["name"] for tensor in info["outputs"]})
            for name, info in manifest["parts"].items() if only is None or name in only}
