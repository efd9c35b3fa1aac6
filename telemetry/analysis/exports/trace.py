"""A Chrome trace-event JSON file (opens in Perfetto UI and chrome://tracing): one process per rank;
its first thread holds the steps with their forward/backward/optimizer phases nested inside, the next
threads every traced collective as a slice with its bytes and bus bandwidth (calls that overlap go to
the next lane, as the format needs slices on one thread to nest). All ranks share one clock (each
rank's wall clock; across hosts only as well as their clocks agree).

Needs ranks/rank*.events.jsonl, which ranks keep only when the run had trace in telemetry.export.
"""
from __future__ import annotations

import json
import os

from telemetry.errors import InputError
from telemetry.formulas import bus_factor
from telemetry.analysis.runs import read_jsonl
from telemetry.rundir import RANK_EVENTS, RANKS, rank_files

STEP_TID = 0
LANE_TID = 1  # collectives: threads 1, 2, ... one per lane


def _phases(line: dict) -> list[tuple[str, float, float]]:
    """forward: from the step's start, or the previous backward's end, to a backward's begin."""
    out, last, opened = [], line.get("t0"), {}
    for name, t in line.get("marks") or ():
        kind, _, edge = name.rpartition("_")
        if edge == "begin":
            opened[kind] = t
            if kind == "backward" and last is not None and t > last:
                out.append(("forward", last, t))
        elif edge == "end" and kind in opened:
            out.append((kind, opened.pop(kind), t))
            last = t
    return out


def build(lines_by_rank: dict[int, list[dict]], run_name: str) -> dict:
    starts = [t for lines in lines_by_rank.values() for ln in lines for t in (ln.get("t0"), ln.get("t1"))
              if t is not None]
    origin = min(starts) if starts else 0.0

    def us(t: float) -> float:
        return round((t - origin) * 1e6, 3)

    def span(a: float, b: float) -> float:  # at the same nanosecond resolution as `us` (not 19032.001999999997)
        return round(us(b) - us(a), 3)

    events = []
    for rank, lines in sorted(lines_by_rank.items()):
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": STEP_TID, "args": {"name": "steps"}})
        lane_end: list[float] = []
        for ln in lines:
            if ln.get("t0") is None or ln.get("t1") is None:
                continue
            step = ln.get("step")
            events.append({"ph": "X", "name": f"step {step}", "cat": "step", "pid": rank, "tid": STEP_TID,
                           "ts": us(ln["t0"]), "dur": span(ln["t0"], ln["t1"]),
                           "args": {"step": step, "calls": len(ln.get("calls") or ()),
                                    "calls_dropped": ln.get("calls_dropped", 0)}})
            for name, a, b in _phases(ln):
                a, b = max(a, ln["t0"]), min(b, ln["t1"])  # inside the step, so the slices nest
                if b >= a:
                    events.append({"ph": "X", "name": name, "cat": "phase", "pid": rank, "tid": STEP_TID,
                                   "ts": us(a), "dur": span(a, b), "args": {"step": step}})
            for op, t, dur, nbytes, size, source, *rest in ln.get("calls") or ():
                args = {"step": step, "bytes": nbytes, "group_size": size, "source": source,
                        **({"group": rest[0]} if rest and rest[0] else {}),
                        "busbw_GBps": nbytes * bus_factor(op, max(size, 1)) / dur / 1e9 if dur else None}
                if dur is None:  # untimed (e.g. still in flight at the step's end): a mark, not a slice
                    events.append({"ph": "i", "s": "t", "name": op, "cat": "collective", "pid": rank,
                                   "tid": LANE_TID, "ts": us(t), "args": {**args, "untimed": True}})
                    continue
                end = t + dur
                lane = next((i for i, e in enumerate(lane_end) if e <= t), None)
                if lane is None:
                    lane = len(lane_end)
                    lane_end.append(end)
                    events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": LANE_TID + lane,
                                   "args": {"name": "collectives" if lane == 0 else f"collectives ({lane + 1})"}})
                lane_end[lane] = end
                events.append({"ph": "X", "name": op, "cat": "collective", "pid": rank, "tid": LANE_TID + lane,
                               "ts": us(t), "dur": span(t, end), "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"run": run_name, "origin_unix_s": origin}}


def write(run, out: str) -> str:
    paths = rank_files(run.path, RANK_EVENTS)
    if not paths:
        raise InputError(f"{os.path.join(run.path, RANKS)}: no rank*.{RANK_EVENTS}; the trace needs a run with trace "
                         "in telemetry.export (per-call timestamps are kept only then)")
    lines = {}
    for p in paths:
        lines[int(os.path.basename(p)[4:9])] = [ln for ln in read_jsonl(p) if "t1" in ln]
    path = os.path.join(out, "trace.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(build(lines, run.name), f)
    return path
