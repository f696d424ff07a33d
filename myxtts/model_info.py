"""model_info.json next to the checkpoints: dataset statistics, steps trained, best validation loss.

Several stages write parts of it (the validation report, the trainer); each update merges its keys
into the file and replaces it atomically, so an interrupted write never leaves a broken file.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

FILENAME = "model_info.json"


def read_model_info(directory: str) -> Dict[str, Any]:
    path = os.path.join(directory, FILENAME)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def update_model_info(directory: str, **fields: Any) -> Dict[str, Any]:
    """Merges `fields` (top-level keys) into directory/model_info.json; returns the new content."""
    os.makedirs(directory, exist_ok=True)
    info = read_model_info(directory)
    info.update(fields)
    path = os.path.join(directory, FILENAME)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return info
