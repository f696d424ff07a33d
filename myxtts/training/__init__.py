"""Training: XTTSTrainer (trainer.py), the compiled step (step.py), precision, optimizer and
schedules, checkpoints, monitoring, and the losses (losses.py). See docs/training.md."""
