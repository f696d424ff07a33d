"""The parts of an on-device export (myxtts.exporters.edge) as callables on numpy arrays:
`part(**inputs) -> {output name: array}`, run by LiteRT (ai-edge-litert's Interpreter, or the
older tflite-runtime) or ONNX Runtime. Imports neither until a part is loaded, and no
TensorFlow ever.
"""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, Optional

import numpy as np

MANIFEST = "manifest.json"


class ExportError(ValueError):
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


def read_manifest(folder: str) -> dict:
    with open(os.path.join(folder, MANIFEST), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != "myxtts-edge":
        raise ExportError(f"{folder}/{MANIFEST} is not a myxtts on-device export manifest.")
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
    return Interpreter(model_path=path, num_threads=threads)


def tflite_part(path: str, threads: int, outputs: Dict[str, str]
                ) -> Callable[..., Dict[str, np.ndarray]]:
    """A LiteRT part; `outputs` maps its signature's output names to the manifest's."""
    runner = _tflite_interpreter(path, threads).get_signature_runner()

    def run(**inputs) -> Dict[str, np.ndarray]:
        return {outputs[key]: value for key, value in runner(**inputs).items()}

    return run


def onnx_part(path: str, threads: int, outputs: Dict[str, str]
              ) -> Callable[..., Dict[str, np.ndarray]]:
    """An ONNX Runtime part; its inputs are the manifest's names with ':0'."""
    try:
        import onnxruntime  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ExportError("Running an ONNX export needs ONNX Runtime: pip install "
                          "onnxruntime.") from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = list(outputs)

    def run(**inputs) -> Dict[str, np.ndarray]:
        values = session.run(names, {f"{k}:0": v for k, v in inputs.items()})
        return {outputs[name]: value for name, value in zip(names, values)}

    return run


def load_parts(folder: str, manifest: dict, threads: int = 1,
               only: Optional[set] = None) -> Dict[str, Callable]:
    load = {"tflite": tflite_part, "onnx": onnx_part}[manifest["runtime"]]
    return {name: load(os.path.join(folder, info["file"]), threads,
                       {tensor["runtime_name"]: tensor["name"] for tensor in info["outputs"]})
            for name, info in manifest["parts"].items() if only is None or name in only}
