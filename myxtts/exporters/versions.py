"""Numbered version folders of an export (export_dir/1, 2, ...), as TF Serving reads them and
every myxtts exporter writes them: a new export never overwrites an old one."""

from __future__ import annotations

import os
from typing import List


def existing_versions(export_dir: str) -> List[int]:
    if not os.path.isdir(export_dir):
        return []
    return sorted(int(n) for n in os.listdir(export_dir) if n.isdigit())


def publish_version(staged: str, export_dir: str) -> int:
    """Renames the staged folder to the next free version number (max existing + 1)."""
    while True:
        version = max(existing_versions(export_dir), default=0) + 1
        target = os.path.join(export_dir, str(version))
        if os.path.lexists(target):  # a concurrent export took it after we listed
            continue
        try:
            os.rename(staged, target)
        except OSError:
            if os.path.lexists(target):
                continue
            raise
        return version
