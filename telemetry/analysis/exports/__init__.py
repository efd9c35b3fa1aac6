"""Outputs other tools read, written from a run directory after the run (nothing on the training path).

    export_run("runs/x", ["tensorboard", "parquet", "trace", "wandb"])

Sources: metrics.jsonl (rank 0's step records, cross-rank figures included), ranks/rank*.telemetry.jsonl
(every rank's own values) and, for the trace, ranks/rank*.events.jsonl (kept only when the run had
`telemetry.export` with trace). Everything lands in RUN/exports/; exports/manifest.json says what was
written and, for a kind that failed (library missing, no events), why.
"""
from __future__ import annotations

import json
import os
import sys

from telemetry.analysis.runs import Run, load_run
from telemetry.errors import InputError

from telemetry.settings import EXPORT_KINDS as KINDS  # noqa: E402


def step_scalars(record: dict) -> dict[str, float]:
    """One step's scalars under the names TensorBoard and W&B show; unknown values are left out (neither
    tool has a null), never written as 0."""
    out = {}

    def put(name, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            out[name] = float(value)

    for key in ("loss", "lr", "grad_norm", "step_time_s", "samples_per_s", "tokens_per_s", "mfu",
                "tflops_per_device", "comm_time_s", "comm_bytes", "exposed_comm_s"):
        put(f"train/{key}" if key in ("loss", "lr", "grad_norm") else f"perf/{key}" if key in (
            "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "tflops_per_device") else f"comm/{key}",
            record.get(key))
    for op, s in sorted((record.get("comm") or {}).items()):
        put(f"comm/{op}/time_s", s.get("time_s"))
        put(f"comm/{op}/bytes", s.get("bytes"))
        put(f"comm/{op}/count", s.get("count"))
        put(f"comm/{op}/busbw_GBps", s.get("busbw_GBps"))
    groups = record.get("comm_groups") or {}
    for name, g in sorted(groups.items()):  # per process group (tp, dp, ...), busbw at the group's size
        for key in ("time_s", "bytes", "count", "busbw_GBps"):
            put(f"comm_group/{name}/{key}", g.get(key))
    inter = [g for g in groups.values() if g.get("scope") == "inter"]
    if groups:  # the fabric's share: what the inter-node groups moved
        put("comm/fabric_bytes", sum(g.get("bytes") or 0 for g in inter))
        times = [g.get("time_s") for g in inter]
        put("comm/fabric_time_s", sum(times) if None not in times else None)
    put("comm/exposed_share", (record.get("exposed") or {}).get("exposed_share"))
    put("comm/exposed_s", (record.get("exposed") or {}).get("exposed_s"))
    for key in ("job_gpu_energy_j", "job_gpu_power_w", "job_cpu_energy_j"):  # sums over the job's GPUs / hosts
        put(f"energy/{key}", record.get(key))
    spread = (record.get("ranks") or {}).get("step_time_s") or {}
    put("ranks/step_time_s_max", spread.get("max"))
    put("ranks/step_time_s_min", spread.get("min"))
    for key in ("eval_loss", "eval_accuracy"):
        put(f"eval/{key[5:]}", record.get(key))
    return out


def check_kinds(kinds) -> list[str]:
    unknown = [k for k in kinds if k not in KINDS]
    if not kinds:
        raise ValueError(f"telemetry.export: got no kind; allowed: one or more of {', '.join(KINDS)}")
    if unknown:
        raise ValueError(f"telemetry.export: got {unknown}; allowed: {', '.join(KINDS)}")
    return list(dict.fromkeys(kinds))


def export_run(path: str, kinds, out: str | None = None) -> dict:
    """Write each kind under `out` (default RUN/exports); returns {kind: {"path": ...} or {"error": ...}}."""
    kinds = check_kinds(kinds)
    run = load_run(path)
    out = out or os.path.join(path, "exports")
    os.makedirs(out, exist_ok=True)
    result = {}
    for kind in kinds:
        try:
            result[kind] = {"path": _WRITERS[kind](run, out)}
        except InputError as exc:  # the run lacks what this kind needs: said as it is, bad input
            result[kind] = {"path": None, "error": str(exc), "input": True}
        except ImportError as exc:  # the kind's library is not installed: a missing tool, bad input too
            result[kind] = {"path": None, "error": f"{type(exc).__name__}: {exc}", "input": True}
        except Exception as exc:  # one kind failing must not cost the others (or the run)
            result[kind] = {"path": None, "error": f"{type(exc).__name__}: {exc}"}
    manifest = os.path.join(out, "manifest.json")
    previous = {}
    if os.path.exists(manifest):
        try:
            with open(manifest, encoding="utf-8") as f:
                previous = json.load(f)
        except ValueError:  # damaged: rewritten from this export's entries
            previous = {}
        if not isinstance(previous, dict):
            previous = {}
    with open(manifest, "w", encoding="utf-8") as f:
        json.dump({**previous, **result}, f, indent=1)
    return result


def _tensorboard(run: Run, out: str) -> str:
    from telemetry.analysis.exports.tensorboard import write
    return write(run, out)


def _wandb(run: Run, out: str) -> str:
    from telemetry.analysis.exports.wandb_offline import write
    return write(run, out)


def _parquet(run: Run, out: str) -> str:
    from telemetry.analysis.exports.parquet import write
    return write(run, out)


def _trace(run: Run, out: str) -> str:
    from telemetry.analysis.exports.trace import write
    return write(run, out)


_WRITERS = {"tensorboard": _tensorboard, "wandb": _wandb, "parquet": _parquet, "trace": _trace}


def export_after_close(telemetry) -> dict | None:
    """Rank 0 writes the exports a run asked for (`telemetry.export`) once its telemetry session has closed
    (close() waits for every rank's files); other ranks, and runs without exports, do nothing. A failure
    is printed, never raised: the run itself succeeded."""
    kinds, run_dir = telemetry.s.export, telemetry.run_dir
    if not kinds or not run_dir or getattr(telemetry, "rank", None) != 0:
        return None
    try:
        result = export_run(run_dir, kinds)
    except Exception as exc:  # say why there are no exports
        result = {k: {"error": f"{type(exc).__name__}: {exc}"} for k in kinds}
    for kind, r in result.items():
        if r.get("error"):
            print(f"[telemetry] export {kind}: not written: {r['error']}", file=sys.stderr, flush=True)
    return result
