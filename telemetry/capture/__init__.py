"""Capture: runs inside the training process, every step (collectives, energy, counters, the session)."""
