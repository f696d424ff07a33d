"""Inference helpers: checkpoint loading, the synthesizer, voice files (voices.py), the exporter,
and the vocoders (vocoding.py: a trained HiFi-GAN, or the Griffin-Lim fallback of
griffin_lim.py)."""
