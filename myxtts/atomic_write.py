"""The one way myxtts replaces a file: write a temporary file with a unique name in the same
folder, fsync it, rename it over the target (`os.replace`, atomic on POSIX), fsync the folder.

A reader, a crash or a power cut then sees either the whole old file or the whole new one, never
an empty or half-written file under the final name; two processes writing the same file do not
share a temporary name. Imports no TensorFlow.
"""

from __future__ import annotations

import os
import tempfile
from typing import Union


def atomic_write(path: str, content: Union[str, bytes]) -> None:
    """Replaces `path` with `content` (str is written as UTF-8), creating its folder if needed.
    Raises OSError (the old file is intact and no temporary file is left)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: str) -> None:
    """Makes the rename itself durable (the folder's entry list reaches the disk)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a folder; the rename is still atomic
    finally:
        os.close(fd)
