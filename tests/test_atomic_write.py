"""Every file myxtts rewrites goes through myxtts.atomic_write: a SIGKILL inside a write leaves
the old file (killed before the rename) or the whole new one (killed after it), never a partial
file, and two writers never share a temporary name.

    python -m pytest tests/test_atomic_write.py -v
"""

import os
import subprocess

import pytest

from myxtts.atomic_write import atomic_write
from tests import children
from tests.children import atomic_write as child

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

OLD = {
    "model_info": ("model_info.json", '{"version": "old"}\n'),
    "vocab": ("vocab.json", '{"old": true}\n'),
    "config": ("config.yaml", "old: true\n"),
    "data_split": ("data_split.json",
                   '{"seed": 0, "val_fraction": 0.5, "val_ids": ["old0"], "train_ids": ["old1"]}'),
    "validation_cache": ("validation_cache.json", '{"version": "old"}'),
    "evaluation_report": ("report.json", '{"version": "old"}'),
    "checkpoint_index": ("checkpoint", 'model_checkpoint_path: "ckpt-1"\n'
                                       'all_model_checkpoint_paths: "ckpt-1"\n'),
    "models_config": ("models.config", 'model_config_list {\n  config {\n    name: "old"\n'
                                       '    base_path: "/models/old"\n'
                                       '    model_platform: "tensorflow"\n  }\n}\n'),
}


def _killed_write(writer: str, folder: str, when: str) -> str:
    name, old = OLD[writer]
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(old)
    proc = subprocess.run(children.command("atomic_write", writer, path, when), cwd=children.REPO,
                          env=children.env(TF_CPP_MIN_LOG_LEVEL="3"), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("writer", sorted(OLD))
def test_a_kill_inside_each_writer_leaves_the_old_or_the_new_file(writer, tmp_path):
    for when in ("before_rename", "after_rename", "expected"):
        os.makedirs(tmp_path / when)
    assert _killed_write(writer, str(tmp_path / "before_rename"), "before_rename") == OLD[writer][1]
    # What the same write leaves when nothing interrupts it (run here, in this process):
    name, old = OLD[writer]
    expected = tmp_path / "expected" / name
    expected.write_text(old, encoding="utf-8")
    child.write(writer, str(expected))
    assert _killed_write(writer, str(tmp_path / "after_rename"), "after_rename") == \
        expected.read_text(encoding="utf-8") != old


def test_no_temporary_file_is_left_when_a_write_fails(tmp_path):
    path = tmp_path / "out.json"
    atomic_write(str(path), "old")

    with pytest.raises(TypeError):
        atomic_write(str(path), 42)  # neither str nor bytes: fails inside the write
    assert path.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


def test_writers_in_one_folder_use_distinct_temporary_names(tmp_path, monkeypatch):
    names = []
    real_replace = os.replace

    def recording_replace(src, dst):
        names.append(os.path.basename(src))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", recording_replace)
    for _ in range(3):
        atomic_write(str(tmp_path / "same.json"), "x")
    assert len(set(names)) == 3 and all(n.startswith(".same.json.") for n in names)
