"""What a training run leaves on disk and how to load it: an ORQA run's model, frozen index, best checkpoint
and evaluation, and warm starts from other runs' checkpoints."""
