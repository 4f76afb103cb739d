"""A run from config to run directory: build, train, checkpoint, signals, tracking."""
