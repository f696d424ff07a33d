"""pytest: the test run's devices are configured before any test module imports TensorFlow
(tests/logical_devices.py); tests that are about a process (kill -9, MirroredStrategy, several
workers) start their own."""

import tests.logical_devices  # noqa: F401  (configures the devices on import)
