"""Put first on PYTHONPATH by `python -m telemetry.integrations.attach`: in every Python process of the job (the
launcher, torchrun's workers, NeMo-Run's children) the collective tracer goes on before the script's
own imports, so megatron binds the traced functions (telemetry/capture/early.py). Then the sitecustomize this
one shadows, if any, runs as it would have."""
import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("FABRIC_HARNESS_RUN_DIR"):
    try:
        import telemetry.capture.early

        telemetry.capture.early.install()
    except Exception as exc:  # never stop the user's job here; the callback refuses loudly later
        print(f"[telemetry] attach: tracer not installed early: {type(exc).__name__}: {exc}", file=sys.stderr)

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _spec is not None and _spec.loader is not None:
    _shadowed = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_shadowed)
