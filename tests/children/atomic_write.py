"""Child process of tests/test_atomic_write.py: runs one of myxtts' file writers over an existing
file and is killed with SIGKILL inside the write.

    python -m tests.children.atomic_write WRITER PATH {before_rename|after_rename}

The kill comes from the write itself (no timing): `before_rename` replaces os.replace,
`after_rename` the folder fsync that follows it.
"""

import json
import os
import signal
import sys

from myxtts import atomic_write as atomic_write_module


def _kill(*_args):
    os.kill(os.getpid(), signal.SIGKILL)


def write(writer: str, path: str) -> None:
    """Writes the NEW content of `writer` to `path`."""
    # pylint: disable=import-outside-toplevel
    if writer == "model_info":
        from myxtts.model_info import update_model_info
        update_model_info(os.path.dirname(path), version="new")
    elif writer == "vocab":
        from myxtts.data.text import Tokenizer
        Tokenizer(list("new"), "basic").save(path)
    elif writer == "config":
        from myxtts.config import XTTSConfig
        config = XTTSConfig()
        config.training.checkpoint_dir = "new"
        config.to_yaml(path)
    elif writer == "data_split":
        from myxtts.data.metadata import Row, split_rows
        rows = [Row(f"new{i}", "text", "s", "en", None, "metadata.csv", i) for i in range(4)]
        split_rows(rows, 0.5, 1, path)
    elif writer == "validation_cache":
        from myxtts.data.validation import AudioFactsCache
        cache = AudioFactsCache(path, "new")
        cache.dirty = True
        cache.save()
    elif writer == "evaluation_report":
        from myxtts.evaluation.free_running import write_json
        write_json(path, {"version": "new"})
    elif writer == "checkpoint_index":
        from myxtts.training.checkpoints import CheckpointSeries
        series = CheckpointSeries(os.path.dirname(path), keep=5)
        series.write_index([os.path.join(os.path.dirname(path), "ckpt-2")])
    elif writer == "models_config":
        from myxtts.exporters.tf_serving import update_models_config
        update_models_config(os.path.join(os.path.dirname(path), "new"), "new", "/models/new")
    else:
        raise ValueError(writer)


def main() -> None:
    writer, path, when = sys.argv[1:]
    if when == "before_rename":
        os.replace = _kill
    else:
        atomic_write_module._fsync_folder = _kill  # pylint: disable=protected-access
    write(writer, path)
    print(json.dumps({"killed": False}))


if __name__ == "__main__":
    main()
