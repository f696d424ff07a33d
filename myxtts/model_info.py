"""model_info.json next to the checkpoints: dataset statistics, steps trained, best validation loss.

Several stages write parts of it (the validation report, the trainer); each update merges its keys
into the file and replaces it atomically, so an interrupted write never leaves a broken file.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError
from myxtts.run_directory import MODEL_INFO_FILE



class ModelInfoError(MyXTTSError, ValueError):
    """model_info.json cannot be read or written; the message says what to do."""


def read_model_info(directory: str) -> Dict[str, Any]:
    """The content of directory/model_info.json ({} when there is none). A file that is not a
    JSON object (e.g. after a hand edit) is an error, so it is never overwritten unread."""
    path = os.path.join(directory, MODEL_INFO_FILE)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        problem = f"not valid JSON ({e})"
    else:
        if isinstance(info, dict):
            return info
        problem = f"a JSON {type(info).__name__}, not an object"
    raise ModelInfoError(
        f"{path} is {problem}. myxtts writes this file (dataset statistics, steps trained, best "
        f"validation loss) and merges new values into it, so it is left as it is. Undo the "
        f"edit, or move the file away: training writes it again (the dataset statistics at "
        f"the next start, the rest at the next checkpoint).")


def update_model_info(directory: str, **fields: Any) -> Dict[str, Any]:
    """Merges `fields` (top-level keys) into directory/model_info.json; returns the new content."""
    os.makedirs(directory, exist_ok=True)
    info = read_model_info(directory)
    info.update(fields)
    path = os.path.join(directory, MODEL_INFO_FILE)
    try:
        atomic_write(path, json.dumps(info, indent=2, ensure_ascii=False, sort_keys=True))
    except OSError as e:
        raise ModelInfoError(f"Cannot write {path}: {e}. The previous version of the file is "
                             f"intact; if the disk is full, free space and run the same command "
                             f"again.") from None
    return info
