"""myxtts-serve: the HTTP API (app), the batching engine, the voice store, audio formats,
metrics and the web page (static/). docs/serving.md describes it."""
