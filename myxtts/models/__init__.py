"""The XTTS-style acoustic model: layers (attention, blocks), encoders, decoder, XTTSModel."""
