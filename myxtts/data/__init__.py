"""Input pipeline: LJSpeech-style folders → validated items → bucketed batches on the data device
→ log-mel features handed to the model device. Entry point: myxtts.data.pipeline.InputPipeline
(API at the top of pipeline.py and in docs/data.md)."""
