"""myxtts-serve: the HTTP API (app), the batching engine, the voice store, audio formats,
metrics and the web page (static/). docs/serving.md describes it. Importing the package imports
no TensorFlow (the command checks its flags first)."""

WORKERS = 2  # batches the engine decodes side by side (one per core of a 2-core machine)
