"""Power per server per collective and size, per fabric: the first published evaluation's power table.

From a sweep's run directory: run.json `telemetry.server_power` (each host's BMC, one window per operation
and size, telemetry/capture/sweep_evidence.py) and sweep.jsonl (the GPUs' power per size, summed over the
ranks). Per (operation, size): the mean whole-server power over the hosts, the energy one operation costs a
server (that power x the operation's time from collectives.json), and the GPUs' power per server beside
it; each fabric's % difference against the first. Sizes held long enough for a reading are those of
sweep.power_sizes (or every size with sweep.min_seconds_per_size); a size without a reading says so.
"""
from __future__ import annotations

import json
import os

from telemetry.rundir import RUN_JSON, SWEEP_SIZES, is_size_record, read_jsonl


def _json(path: str) -> dict:
    """The JSON object in `path`, or {} (no file, not a regular file: a FIFO's open waited forever, damaged)."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, nesting thousands deep
        return {}
    return doc if isinstance(doc, dict) else {}


def readings(run_dir: str) -> dict[tuple[str, int], dict]:
    """(op, size) -> {"server_w": mean over hosts, "hosts": n, "gpu_w_per_server", "time_us", "why"}."""
    info = _json(os.path.join(run_dir, RUN_JSON))
    power = ((info.get("telemetry") or {}).get("server_power")) or {}
    hosts = [h for h in power.values() if isinstance(h, dict)]
    out: dict[tuple[str, int], dict] = {}
    for h in hosts:
        for row in h.get("rows") or []:
            e = out.setdefault((row["op"], row["bytes"]), {"server_w": [], "hosts": 0})
            if row.get("watts") is not None:
                e["server_w"].append(row["watts"])
            e["hosts"] += 1
    sweep = _json(os.path.join(run_dir, "collectives.json"))
    n_hosts = len({h for h in (info.get("hosts") or []) if isinstance(h, dict) for h in [h.get("hostname")]}) or 1
    times = {}
    for op, d in (sweep.get("ops") or {}).items():
        for r in d.get("rows") or []:
            blocks = [b for b in (r.get("out_of_place"), r.get("in_place")) if b]
            if blocks:
                times[(op, r.get("requested_bytes") or r["size"])] = min(b["time_us"] for b in blocks)
                times.setdefault((op, r["size"]), times[(op, r.get("requested_bytes") or r["size"])])
    gpu = {}
    path = os.path.join(run_dir, SWEEP_SIZES)
    # a damaged, torn or wrongly shaped line is left out (a binary line was a UnicodeDecodeError traceback)
    for rec in read_jsonl(path, check=is_size_record) if os.path.isfile(path) else []:
        if rec.get("gpu_power_w_sum") is not None:
            key = (rec["op"], rec.get("requested_bytes") or rec["size"])
            gpu[key] = rec["gpu_power_w_sum"] / n_hosts
    result = {}
    for key in set(out) | set(gpu):
        e = out.get(key, {"server_w": [], "hosts": 0})
        w = sum(e["server_w"]) / len(e["server_w"]) if e["server_w"] else None
        why = None if w is not None else (
            "no BMC reading in the window (hold the size longer: sweep.min_seconds_per_size)" if e["hosts"] else
            next((h.get("reason") for h in hosts if h.get("reason")), "no server power recorded (telemetry.bmc)"))
        result[key] = {"server_w": w, "hosts": len(e["server_w"]), "gpu_w_per_server": gpu.get(key),
                       "time_us": times.get(key), "why": why}
    return result


def _pct(v, base):
    return None if v is None or not base else (v - base) / base


def table(labels: list[str], run_dirs: list[str]) -> tuple[str, list[str], list[list[str]]] | None:
    per = [readings(d) if d else {} for d in run_dirs]
    keys = sorted({k for p in per for k, v in p.items() if v.get("server_w") is not None or
                   v.get("gpu_w_per_server") is not None}, key=lambda k: (k[0], k[1]))
    if not keys:
        return None
    from telemetry.analysis.compare_figures import size_text
    rows = []
    for op, size in keys:
        base = per[0].get((op, size)) or {}
        cells = []
        for j, p in enumerate(per):
            r = p.get((op, size))
            if r is None:
                cells.append("n/a (size not in this fabric's sweep)")
                continue
            if r["server_w"] is None:
                text = f"server n/a ({r['why']})"
            else:
                pct = _pct(r["server_w"], base.get("server_w")) if j else None
                text = f"{r['server_w']:.0f} W/server" + (f" ({pct * 100:+.1f}%)" if pct is not None else "")
                if r["time_us"]:
                    text += f", {r['server_w'] * r['time_us'] * 1e-6 * 1e3:.3g} mJ/op"
            gpu = r["gpu_w_per_server"]
            text += "; GPUs " + (f"{gpu:.0f} W/server" + (
                f" ({_pct(gpu, base.get('gpu_w_per_server')) * 100:+.1f}%)"
                if j and base.get("gpu_w_per_server") else "") if gpu is not None else "n/a")
            cells.append(text)
        rows.append([op, size_text(size)] + cells)
    return ("Server power per collective and size (each host's BMC, mean over the hosts; energy per operation "
            "= that power x the operation's time; the GPUs' power per server beside it; % against the first "
            "fabric)", ["collective", "size", *labels], rows)
