"""myxtts: a TensorFlow/Keras trainer for XTTS-style text-to-speech on a data device and a model
device. Importing this package does not import TensorFlow (devices are configured first)."""

__version__ = "0.1.0"
