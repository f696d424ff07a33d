"""myxtts.lite: on-device synthesis from a LiteRT or ONNX export, without TensorFlow."""
