"""Exporters by format: each turns a checkpoint directory into files another runtime loads
(`tf_serving`: a versioned SavedModel and models.config, myxtts.exporters.tf_serving;
`tflite` and `onnx`: the model in static-shape parts for myxtts.lite, myxtts.exporters.edge). A format
registers its function with `@register(name)`; `exporter(name)` imports its module on first
use, so a format's dependencies (TF Serving's protos, a converter) load only when it is used.
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, List

# Format → the module that registers it.
_MODULES = {"tf_serving": "myxtts.exporters.tf_serving", "tflite": "myxtts.exporters.edge",
            "onnx": "myxtts.exporters.edge"}
_EXPORTERS: Dict[str, Callable] = {}


def register(name: str) -> Callable[[Callable], Callable]:
    """Decorator: the export function of format `name`."""

    def add(function: Callable) -> Callable:
        _EXPORTERS[name] = function
        return function

    return add


def formats() -> List[str]:
    return sorted(_MODULES)


def exporter(name: str) -> Callable:
    """The export function of format `name` (KeyError naming the known formats)."""
    if name not in _MODULES:
        raise KeyError(f"Unknown export format {name!r}; known: {', '.join(formats())}.")
    importlib.import_module(_MODULES[name])
    return _EXPORTERS[name]
