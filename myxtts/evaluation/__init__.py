"""Free-running evaluation: does a model say the text it is given? (DESIGN.md, "Judging a
model"). metrics.py holds the measures, pure numpy, shared by the trainer's validation log and
`myxtts-evaluate`."""
