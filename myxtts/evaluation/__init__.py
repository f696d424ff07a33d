"""Free-running evaluation: does a model say the text it is given? (docs/evaluation.md).
metrics.py holds the measures, pure numpy, shared by the trainer's validation log and
`myxtts-evaluate`."""
