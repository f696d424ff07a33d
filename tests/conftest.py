"""pytest: the test run's devices are configured before any test module imports TensorFlow
(tests/logical_devices.py); tests that are about a process (kill -9, MirroredStrategy, several
workers) start their own.

The suite runs on two pytest-xdist workers (pyproject.toml: `-n 2 --dist loadgroup`): each test
module goes whole to one worker, in its own order, so a class's setUpClass runs once; modules
that share what a process trains or exports once (tests/flite_reader.py,
tests/serve_process.py) go to the same worker. Each worker is a process of its own with its own
two logical devices."""

import os

import pytest

import tests.logical_devices  # noqa: F401  (configures the devices on import)

# Modules that share one process's cached work, by the helper that caches it.
SHARED_WORK = {
    "test_learns_to_clone": "flite_reader",
    "test_learns_to_read": "flite_reader",
    "test_serve": "serve_process",
    "test_serve_page": "serve_process",
}


# Before xdist's own hook, which reads the group marks into the test ids.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        module = os.path.splitext(os.path.basename(str(item.fspath)))[0]
        item.add_marker(pytest.mark.xdist_group(SHARED_WORK.get(module, module)))
