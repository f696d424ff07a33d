"""The HiFi-GAN vocoder stage: generator, discriminators, losses (docs/vocoder.md)."""
