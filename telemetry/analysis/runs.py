"""Reading a run directory back (tolerant of killed jobs: a truncated last line is skipped)."""
from __future__ import annotations

import glob
import json
import os
import statistics
from dataclasses import dataclass, field


class RunError(Exception):
    """A run directory that cannot be read; one line naming the path and the problem."""


def read_jsonl(path: str) -> list[dict]:
    rows = []
    if not os.path.exists(path):
        return rows
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


# Names before the scope and unit rules (docs/telemetry.md, "One record"): job-wide sums now carry job_,
# bandwidths in bytes/s _GBps. Older run directories are read under the new names.
RENAMED_FIELDS = {"energy_j": "job_gpu_energy_j", "power_w": "job_gpu_power_w", "cpu_energy_j": "job_cpu_energy_j",
                  "net_tx_bytes": "job_net_tx_bytes", "net_rx_bytes": "job_net_rx_bytes",
                  "rdma_tx_bytes": "job_rdma_tx_bytes", "rdma_rx_bytes": "job_rdma_rx_bytes",
                  "loss_events": "job_loss_events"}
RENAMED_UNITS = {"busbw_gbps": "busbw_GBps", "algbw_gbps": "algbw_GBps", "avg_busbw_gbps": "avg_busbw_GBps",
                 "busbw_min_gbps": "busbw_min_GBps", "busbw_max_gbps": "busbw_max_GBps"}


def _rename(d: dict, names: dict) -> dict:
    for old, new in names.items():
        if old in d and new not in d:
            d[new] = d.pop(old)
    return d


def upgrade_record(record: dict) -> dict:
    """A metrics.jsonl (or ranks/) line under the current names; current lines pass unchanged."""
    _rename(record, RENAMED_FIELDS)
    for stats in (record.get("comm") or {}).values():
        if isinstance(stats, dict):
            _rename(stats, RENAMED_UNITS)
    return record


def upgrade_sweep(sweep: dict) -> dict:
    """A collectives.json (sweep or nccl-tests JSON) under the current unit names."""
    for op in (sweep.get("ops") or {}).values():
        _rename(op, RENAMED_UNITS)
        for row in op.get("rows") or []:
            for block in row.values():
                if isinstance(block, dict):
                    _rename(block, RENAMED_UNITS)
                    if isinstance(block.get("spread"), dict):  # repeats: min and max over them
                        _rename(block["spread"], RENAMED_UNITS)
    return sweep


@dataclass
class Run:
    path: str
    info: dict
    metrics: list[dict]
    ranks: dict[int, list[dict]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.info.get("name") or os.path.basename(os.path.normpath(self.path))

    def timed_steps(self) -> list[dict]:
        """Steps fit for timing statistics: not the warm-up step, not profiled steps."""
        rows = [r for r in self.metrics if not r.get("profiled")]
        return rows[1:] if len(rows) > 1 else rows


def load_run(path: str) -> Run:
    run_json = os.path.join(path, "run.json")
    if not os.path.isdir(path):
        raise RunError(f"{path}: not a directory")
    if not os.path.isfile(run_json):
        raise RunError(f"{path}: no run.json (is this a run directory?)")
    try:
        with open(run_json, encoding="utf-8") as f:
            info = json.load(f)
    except json.JSONDecodeError as exc:
        raise RunError(f"{run_json}: not valid JSON ({exc})") from None
    ranks = {}
    for p in sorted(glob.glob(os.path.join(path, "ranks", "rank*.telemetry.jsonl"))):
        rank = int(os.path.basename(p)[4:9])
        ranks[rank] = [upgrade_record(r) for r in read_jsonl(p)]
    final = info.get("final") or {}
    _rename(final, RENAMED_UNITS)  # a sweep's avg_busbw per collective
    metrics = [upgrade_record(r) for r in read_jsonl(os.path.join(path, "metrics.jsonl"))]
    return Run(path, info, metrics, ranks)


def percentile(values: list[float], q: float) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
