"""Two logical CPU devices for the whole test run, configured by myxtts before TensorFlow
initialises: /CPU:0 is the data device, /CPU:1 the model device.

tests/conftest.py imports this before pytest collects any test module; a module run on its own
(`python -m unittest tests.test_dual_gpu_device_placement`) imports it first itself. Importing it
again is free (Python keeps the module), so the devices are configured once per process.
"""

from myxtts import devices

PLAN = devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))
