"""The collective tracer installed before Megatron, NeMo or Megatron-Bridge is imported.

megatron-core binds torch.distributed's all-gather and reduce-scatter to its own module globals when
it is imported (e.g. `dist_all_gather_func = torch.distributed.all_gather_into_tensor`). Wrappers put
on `torch.distributed` after that import are never called by it: the tensor-parallel and
distributed-optimizer traffic would silently be missing from the telemetry. So the wrappers go on
first, once per process, and every later `Telemetry` shares this tracer (telemetry/capture/session.py).

    import telemetry.capture.early; telemetry.capture.early.install()   # before importing nemo/megatron
    # or: python -m telemetry.integrations.attach ... (does it in every rank, before the script's own imports)

`stale_bindings()` finds module globals of megatron/nemo that still hold an unwrapped torch.distributed
function (the import came first); the Lightning callback refuses to start on any (ImportOrderError).
"""
from __future__ import annotations

import sys
import threading

from telemetry.capture.collectives import CollectiveTracer
from telemetry.errors import HarnessError

# Packages that bind collectives at import; their modules are searched for unwrapped functions.
BINDING_PACKAGES = ("megatron", "nemo", "nemo_automodel")

_LOCK = threading.Lock()
_TRACER: CollectiveTracer | None = None


class ImportOrderError(HarnessError, RuntimeError):
    """Megatron/NeMo was imported before the tracer: its bound collectives would go uncounted."""


def install() -> CollectiveTracer:
    """Install the process-wide tracer (idempotent). Call before megatron/nemo are imported."""
    global _TRACER
    with _LOCK:
        if _TRACER is None:
            _TRACER = CollectiveTracer()
        _TRACER.install()
        return _TRACER


def process_tracer() -> CollectiveTracer | None:
    """The installed process-wide tracer, or None."""
    return _TRACER if _TRACER is not None and _TRACER.installed else None


def _originals() -> dict[int, str]:
    """id -> name of the unwrapped torch.distributed functions the tracer replaces."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from telemetry.capture.collectives import DIST_SPECS, FUNCOL_SPECS

    out: dict[int, str] = {}
    tracer = process_tracer()
    modules = [(dist, DIST_SPECS), (c10d, DIST_SPECS)]
    try:
        import torch.distributed._functional_collectives as funcol
        modules.append((funcol, FUNCOL_SPECS))
    except ImportError:
        pass
    for module, names in modules:
        for name in (*names, "batch_isend_irecv", "_broadcast_coalesced"):
            fn = getattr(module, name, None)
            if fn is None:
                continue
            original = tracer._orig.get((module, name), fn) if tracer is not None else fn
            if tracer is None or (module, name) in tracer._orig:
                out[id(original)] = f"{module.__name__}.{name}"
    return out


def stale_bindings(packages: tuple[str, ...] = BINDING_PACKAGES) -> list[str]:
    """`module.global -> torch function` for every loaded module of `packages` holding an unwrapped
    collective: each is a call the tracer cannot see."""
    originals = _originals()
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in packages:
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            fn = originals.get(id(value)) if callable(value) else None
            if fn is not None:
                found.append(f"{name}.{attr} -> {fn}")
    return sorted(found)


def require_early() -> CollectiveTracer:
    """The process tracer, installed now if nothing that binds collectives is loaded yet; otherwise an
    ImportOrderError naming what was imported too early and how to fix it."""
    if process_tracer() is None:
        loaded = sorted({n.split(".")[0] for n in sys.modules if n.split(".")[0] in BINDING_PACKAGES})
        if not loaded:
            return install()
        tracer = install()  # wrap what can still be wrapped, then see what escaped
        stale = stale_bindings()
        if stale:
            raise ImportOrderError(
                f"{', '.join(loaded)} imported before the telemetry tracer: {len(stale)} collective(s) bound at "
                f"import would go uncounted (e.g. {stale[0]}); call telemetry.capture.early.install() before importing "
                "them, or start the job with python -m telemetry.integrations.attach")
        return tracer
    stale = stale_bindings()
    if stale:
        raise ImportOrderError(
            f"{len(stale)} collective(s) bound before the telemetry tracer was installed (e.g. {stale[0]}); "
            "call telemetry.capture.early.install() before importing megatron/nemo, or use python -m telemetry.integrations.attach")
    return process_tracer()


def reset() -> None:
    """Uninstall and forget the process tracer (tests that run a recorder in-process). Modules that bound
    its wrappers keep them; their calls then go where torch.distributed points (a later tracer, or torch's own)."""
    global _TRACER
    with _LOCK:
        if _TRACER is not None:
            _TRACER.uninstall()
        _TRACER = None
