"""Our run directory for a training loop that is not ours (NeMo 2 / Lightning, Megatron-Bridge, AutoModel).

The directory is the one `python -m trainer` writes (docs/run-directory.md, owned by telemetry/rundir.py): run.json (layout,
hosts, software, redacted environment, fabric identity and NCCL transport, telemetry summary, status),
metrics.jsonl (one line per optimizer step, rank 0), ranks/ and logs/ (NCCL's INFO log), so
`python -m telemetry report` and `compare` read it unchanged. The engine adapters
(telemetry/integrations/lightning.py, telemetry/integrations/engines.py) only translate their loop's step boundaries into

    rec = RunRecorder("runs/x", ...)   # before the process group: NCCL reads its log settings at init
    rec.start(rank, layout)            # every rank, once the process group exists
    rec.begin_step(step); ...; rec.end_step(step, loss=..., lr=...)   # every rank (collective)
    rec.close("completed")

Constructing a recorder refuses (ImportOrderError) when megatron/nemo bound their collectives before
the tracer was installed (telemetry/capture/early.py).
"""
from __future__ import annotations

import os
import sys
import time
from importlib import metadata

import torch
import torch.distributed as dist

from telemetry.analysis.exports import export_after_close
from telemetry.capture import early, fabric
from telemetry.capture.environment import redacted_env, software_versions
from telemetry.capture.session import Telemetry, TelemetrySettings
from telemetry.rundir import RunDir, now_iso

_ACTIVE: set[str] = set()  # run directories a recorder of this process is writing

ENGINE_PACKAGES = ("nemo-toolkit", "megatron-core", "megatron-bridge", "nemo-automodel", "lightning",
                   "pytorch-lightning", "transformer-engine")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def number(value) -> float | None:
    """A finite float from a tensor or number; None for anything else (unknown, never 0)."""
    try:
        out = float(value.detach()) if isinstance(value, torch.Tensor) else float(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return out if out == out and abs(out) != float("inf") else None


class RunRecorder:
    def __init__(self, run_dir: str, name: str | None = None, settings: TelemetrySettings | None = None,
                 expect: str = "any", recipe: dict | None = None, layout: dict | None = None,
                 engine: str | None = None):
        if expect not in fabric.EXPECTATIONS:
            raise ValueError(f"expect: got {expect!r}; allowed: {', '.join(fabric.EXPECTATIONS)}")
        self.run_dir = run_dir
        self.name = name or os.path.basename(os.path.normpath(run_dir))
        self.settings = settings or TelemetrySettings()
        self.expect, self.recipe, self.layout, self.engine = expect, recipe, layout, engine
        self.tracer = early.require_early()
        self.backend = "nccl" if torch.cuda.is_available() else "gloo"
        Telemetry.prepare_environment(self.settings, run_dir, self.backend)
        self.telemetry: Telemetry | None = None
        self.rundir = RunDir(run_dir, 0)  # the one writer of run.json, metrics.jsonl and the disk reserve
        self.rank = 0
        self._t0 = None
        self._started = None
        self._checked = False
        self.closed = False

    @property
    def started(self) -> bool:
        return self.telemetry is not None

    @property
    def info(self) -> dict:
        return self.rundir.info

    def _update(self, **fields) -> None:
        self.rundir.update(**fields)

    def start(self, rank: int | None = None, layout: dict | None = None) -> None:
        """Write run.json and start the telemetry; every rank, after init_process_group. `layout`: what
        the adapter read from the engine, used when the recipe's layout was not given."""
        if self.started:
            return
        key = os.path.abspath(self.run_dir)
        if key in _ACTIVE:  # e.g. a script's own callback and the attach entry point's: one writer only
            print(f"[telemetry] {self.run_dir}: already recorded by another callback in this process; this one "
                  "stays idle", file=sys.stderr, flush=True)
            return
        _ACTIVE.add(key)
        self.rank = rank if rank is not None else (dist.get_rank() if dist.is_initialized() else 0)
        self.rundir.rank = self.rank
        self.rundir.create()
        self._started = time.time()
        software = software_versions()
        software.update({k: _version(k) for k in ENGINE_PACKAGES})
        backend = dist.get_backend() if dist.is_initialized() else self.backend
        hosts = fabric.exchange_hosts(self.rank)
        device = (torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available()
                  else torch.device("cpu"))
        fab = fabric.describe(backend, software.get("nccl"))
        fab["expectation"] = fabric.check_expectation(self.expect, fab["transport"])
        self._update(name=self.name, engine=self.engine, status="running", exit_code=None, error=None,
                     start_time=now_iso(), end_time=None, command=list(sys.argv), recipe=self.recipe,
                     layout=self.layout if self.layout is not None else layout, software=software,
                     environment=redacted_env(), backend=backend,
                     device={"type": device.type,
                             "name": torch.cuda.get_device_name(device) if device.type == "cuda" else None},
                     hosts=hosts, fabric=fab)
        self.telemetry = Telemetry(self.settings, self.run_dir, device)
        self.telemetry.start()
        self.rundir.open_metrics(append=True)  # an engine's own resume continues the same file

    def note(self, text: str) -> None:
        self.info.setdefault("notes", []).append(text)

    def begin_step(self, step: int) -> None:
        if self.started and not self.closed:
            self.telemetry.start_step(step)
            self._t0 = time.perf_counter()

    def end_step(self, step: int, loss=None, lr=None, extra: dict | None = None) -> dict | None:
        """The step's metrics line (written by rank 0); call on every rank: the cross-rank reduction
        is collective."""
        if not self.started or self.closed or self._t0 is None:
            return None
        step_time = time.perf_counter() - self._t0
        self._t0 = None
        gbs = (self.info.get("layout") or {}).get("global_batch_size")
        record = {"step": step, "loss": number(loss), "lr": number(lr), "step_time_s": step_time,
                  "samples_per_s": gbs / step_time if gbs and step_time > 0 else None,
                  # the engine's data pipeline pads and packs: our token count is not known here
                  "tokens_per_s": None, **(extra or {})}
        record.update(self.telemetry.end_step(step, step_time))
        record["time"] = time.time()
        self.rundir.write_metrics(record)
        if not self._checked:  # NCCL builds its communicators lazily: the transport is known after step 1
            self._checked = True
            self._refresh_fabric(final=False)
        return record

    def _refresh_fabric(self, final: bool) -> None:
        if self.rank != 0:
            return
        fab = self.info["fabric"]
        if fab["backend"] == "nccl":
            logs = os.path.join(self.run_dir, "logs")
            nccl = fabric.detect_nccl_transport(logs, None if final else fabric.nccl_log_host())
            fab["nccl"], fab["transport"] = nccl, nccl["transport"] if nccl else None
        fab["expectation"] = fabric.check_expectation(self.expect, fab["transport"])
        self._update(fabric=fab)
        if not final and fab["expectation"].get("warning"):
            bar = "!" * 78
            print(f"{bar}\n[telemetry] WARNING: {fab['expectation']['warning']}\n{bar}", file=sys.stderr, flush=True)

    def close(self, status: str = "completed", code: int = 0, error: str | None = None) -> None:
        if self.closed or not self.started:
            return
        self.closed = True
        _ACTIVE.discard(os.path.abspath(self.run_dir))
        try:
            if dist.is_initialized():
                self._refresh_fabric(final=True)
            self._update(telemetry=self.telemetry.summary())
            self.telemetry.close()
            export_after_close(self.telemetry)
        finally:
            self._update(status=status, exit_code=code, error=error, end_time=now_iso(),
                         duration_s=round(time.time() - self._started, 3) if self._started else None)
            self.rundir.close()
