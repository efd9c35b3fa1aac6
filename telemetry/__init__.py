"""Fabric telemetry: a library usable from any training loop, plus `python -m telemetry`.

The public face for a loop's author (docs/telemetry.md); the rooms behind it (capture/, integrations/,
analysis/) are an inside matter:

    from telemetry import RunRecorder, TelemetrySettings
    rec = RunRecorder("runs/x", settings=TelemetrySettings(profile_every=50))

Names load on first use (PEP 562), so `import telemetry` costs nothing and pulls in no torch: analysis
(`load_run`) stays usable on a laptop without it.
"""
from __future__ import annotations

import importlib

# public name -> the module that owns it
PUBLIC = {
    "RunRecorder": "telemetry.integrations.recorder",  # one run's lifecycle, for any loop
    "TelemetryCallback": "telemetry.integrations.lightning",  # Lightning / NeMo 2
    "BridgeTelemetry": "telemetry.integrations.engines",  # Megatron-Bridge
    "automodel_recipe": "telemetry.integrations.engines",  # NeMo AutoModel
    "hf_callback": "telemetry.integrations.adapters",  # a Hugging Face Trainer, with a bare Telemetry
    "Telemetry": "telemetry.capture.session",  # the capture session a recorder drives
    "CollectiveTracer": "telemetry.capture.collectives",  # the collective tracer
    "install_tracer": "telemetry.capture.early",  # before megatron/nemo bind torch.distributed
    "TelemetrySettings": "telemetry.settings",
    "load_run": "telemetry.analysis.runs",  # a run directory, read (no torch)
}
ALIASES = {"install_tracer": "install"}

__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'telemetry' has no attribute {name!r}; public: {', '.join(__all__)}")
    value = getattr(importlib.import_module(PUBLIC[name]), ALIASES.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
