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
        ranks[rank] = read_jsonl(p)
    return Run(path, info, read_jsonl(os.path.join(path, "metrics.jsonl")), ranks)


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
