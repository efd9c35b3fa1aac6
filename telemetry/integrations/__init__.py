"""Integrations: drive capture from loops that are not ours (HF Trainer, Lightning/NeMo, DeepSpeed, attach)."""
