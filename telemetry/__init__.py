"""Fabric telemetry: a library usable from any training loop, plus `python -m telemetry`."""
