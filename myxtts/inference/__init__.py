"""Inference helpers: Griffin-Lim (griffin_lim.py) until a neural vocoder exists."""
