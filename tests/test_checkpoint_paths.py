"""Where checkpoints are looked for: a relative checkpoint folder resumes from the working
directory, an index that names files elsewhere (written by an older version) falls back to the
intact checkpoints in the folder, and missing files are told apart from damaged ones.

    python -m pytest tests/test_checkpoint_paths.py -v
"""

import logging
import os

import pytest
import tensorflow as tf

from myxtts.training.checkpoints import CheckpointError, CheckpointStore


def _store(directory, keep=5):
    step = tf.Variable(0, dtype=tf.int64)
    weights = tf.Variable(tf.zeros([4]))
    return CheckpointStore(directory, {"step": step, "weights": weights}, keep=keep), step, weights


def _save(directory, steps, keep=5):
    store, step, weights = _store(directory, keep)
    for n in steps:
        step.assign(n)
        weights.assign(tf.fill([4], float(n)))
        store.save(n)


def _index(directory):
    with open(os.path.join(directory, "checkpoint"), encoding="utf-8") as f:
        return f.read()


@pytest.fixture
def warnings(caplog):
    caplog.set_level(logging.WARNING, logger="myxtts.training")
    return caplog


def test_a_relative_folder_resumes_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _save(os.path.join("runs", "tiny"), [1, 2])
    store, step, weights = _store(os.path.join("runs", "tiny"))
    assert store.restore_latest() == (os.path.join("runs", "tiny", "ckpt-2"), 2)
    assert float(weights[0]) == 2.0 and int(step.numpy()) == 2
    assert store.latest == os.path.join("runs", "tiny", "ckpt-2")
    # The index holds names relative to its own folder, so the run can be moved.
    assert 'model_checkpoint_path: "ckpt-2"' in _index(os.path.join("runs", "tiny"))


def test_an_index_naming_another_place_falls_back_to_the_folder(tmp_path, monkeypatch, warnings):
    monkeypatch.chdir(tmp_path)
    directory = os.path.join("runs", "tiny")
    _save(directory, [1, 2, 3])
    # What the previous version wrote after resuming: entries with the folder joined twice.
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write('model_checkpoint_path: "runs/tiny/ckpt-3"\n'
                'all_model_checkpoint_paths: "runs/tiny/ckpt-2"\n'
                'all_model_checkpoint_paths: "runs/tiny/ckpt-3"\n')
    store, step, weights = _store(directory)
    assert store.restore_latest() == (os.path.join(directory, "ckpt-3"), 3)
    assert float(weights[0]) == 3.0
    text = warnings.text
    assert "its files are missing (not damaged: absent)" in text
    assert "damaged (" not in text
    assert "did not list it" in text
    # The index now lists the folder's own checkpoints, and nothing was archived.
    assert [p for p in store.series.paths] == [os.path.join(directory, f"ckpt-{n}")
                                               for n in (1, 2, 3)]
    assert not os.path.exists(os.path.join(directory, "archive"))
    step.assign(4)
    store.save(4)
    again, _, _ = _store(directory)
    assert again.restore_latest() == (os.path.join(directory, "ckpt-4"), 4)


def test_missing_files_are_not_called_damaged(tmp_path):
    directory = str(tmp_path / "run")
    _save(directory, [1])
    for name in os.listdir(directory):
        if name.startswith("ckpt-1."):
            os.remove(os.path.join(directory, name))
    store, _, _ = _store(directory)
    with pytest.raises(CheckpointError) as error:
        store.restore_latest()
    message = str(error.value)
    assert f"the index lists {directory}/ckpt-1 whose files are missing" in message
    assert "damaged" not in message
    assert "--resume-from" in message


def test_reset_is_never_advised_while_a_readable_checkpoint_exists(tmp_path, warnings):
    directory = str(tmp_path / "run")
    _save(directory, [1, 2])
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as f:
        f.write('model_checkpoint_path: "elsewhere/ckpt-2"\n'
                'all_model_checkpoint_paths: "elsewhere/ckpt-2"\n')
    store, _, _ = _store(directory)
    assert store.restore_latest() == (os.path.join(directory, "ckpt-2"), 2)
    assert "--reset-training" not in warnings.text


def test_a_worker_follows_the_chiefs_relative_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _save(os.path.join("runs", "chief"), [1, 2])
    worker, step, weights = _store(str(tmp_path / "worker"))
    assert worker.restore_latest_of(os.path.join("runs", "chief")) == (
        os.path.join("runs", "chief", "ckpt-2"), 2)
    assert float(weights[0]) == 2.0
    assert worker.restore_latest_of(str(tmp_path / "nothing")) is None
