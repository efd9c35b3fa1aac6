"""Parquet tables (pyarrow) with fixed schemas, so many runs' files concatenate in pandas or DuckDB
(`SELECT * FROM 'runs/*/exports/steps.parquet'`). Schemas: docs/telemetry.md, "Parquet exports".

steps.parquet: one row per step (rank 0's metrics.jsonl; job-wide figures).
collectives.parquet: one row per rank, step and collective type (ranks/rank*.telemetry.jsonl).
groups.parquet: one row per rank, step, process group and collective type (the same files' `comm_groups`;
    none for runs recorded before groups were).
calls.parquet: one row per traced call, only where the run kept events (telemetry.export with trace).
Unknown values are nulls, never 0.
"""
from __future__ import annotations

import json
import os

from telemetry.analysis.runs import read_jsonl
from telemetry.rundir import RANK_EVENTS, StepKey, rank_files


def _schemas():
    import pyarrow as pa

    f64, i64, s = pa.float64(), pa.int64(), pa.string()
    steps = pa.schema([
        ("run", s), ("run_name", s), (StepKey.STEP, i64), (StepKey.TIME, f64), (StepKey.LOSS, f64),
        (StepKey.LR, f64), (StepKey.GRAD_NORM, f64), (StepKey.STEP_TIME_S, f64), (StepKey.SAMPLES_PER_S, f64),
        (StepKey.TOKENS_PER_S, f64), (StepKey.TOKENS, i64), (StepKey.TFLOPS_PER_DEVICE, f64), (StepKey.MFU, f64),
        (StepKey.COMM_TIME_S, f64), (StepKey.COMM_BYTES, i64), (StepKey.EXPOSED_COMM_S, f64), ("exposed_share", f64),
        ("exposed_s", f64), (StepKey.JOB_GPU_ENERGY_J, f64), (StepKey.JOB_GPU_POWER_W, f64),
        (StepKey.JOB_CPU_ENERGY_J, f64), ("step_time_s_min", f64), ("step_time_s_max", f64),
        ("step_time_s_max_rank", i64), ("comm_time_s_max", f64), ("comm_time_s_max_rank", i64),
        (StepKey.EVAL_LOSS, f64), (StepKey.EVAL_ACCURACY, f64), (StepKey.PROFILED, pa.bool_())])
    collectives = pa.schema([
        ("run", s), ("run_name", s), ("rank", i64), ("step", i64), ("op", s), ("count", i64), ("bytes", i64),
        ("time_s", f64), ("busbw_GBps", f64), ("untimed", i64), ("untimed_reason", s)])
    calls = pa.schema([
        ("run", s), ("run_name", s), ("rank", i64), ("step", i64), ("op", s), ("t_issue", f64),
        ("duration_s", f64), ("bytes", i64), ("group_size", i64), ("busbw_GBps", f64), ("source", s), ("group", s)])
    return steps, collectives, calls


def _group_schema():
    import pyarrow as pa

    f64, i64, s = pa.float64(), pa.int64(), pa.string()
    return pa.schema([
        ("run", s), ("run_name", s), ("rank", i64), ("step", i64), ("group", s), ("dim", s), ("scope", s),
        ("group_size", i64), ("op", s), ("count", i64), ("bytes", i64), ("time_s", f64), ("busbw_GBps", f64),
        ("untimed", i64)])


def _num(v, kind=float):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return None
    return kind(v)


def step_rows(run) -> list[dict]:
    name, label = os.path.basename(os.path.normpath(run.path)), run.name
    rows = []
    for r in run.metrics:
        if r.get(StepKey.STEP) is None:
            continue
        spread = r.get(StepKey.RANKS) or {}
        st, ct = spread.get(StepKey.STEP_TIME_S) or {}, spread.get(StepKey.COMM_TIME_S) or {}
        ex = r.get(StepKey.EXPOSED) or {}
        rows.append({
            "run": name, "run_name": label, StepKey.STEP: int(r[StepKey.STEP]), StepKey.TIME: _num(r.get(StepKey.TIME)),
            **{k: _num(r.get(k)) for k in (StepKey.LOSS, StepKey.LR, StepKey.GRAD_NORM, StepKey.STEP_TIME_S,
                                           StepKey.SAMPLES_PER_S, StepKey.TOKENS_PER_S, StepKey.TFLOPS_PER_DEVICE,
                                           StepKey.MFU, StepKey.COMM_TIME_S, StepKey.EXPOSED_COMM_S, StepKey.EVAL_LOSS,
                                           StepKey.EVAL_ACCURACY, StepKey.JOB_GPU_ENERGY_J, StepKey.JOB_GPU_POWER_W,
                                           StepKey.JOB_CPU_ENERGY_J)},
            StepKey.TOKENS: _num(r.get(StepKey.TOKENS), int), StepKey.COMM_BYTES: _num(r.get(StepKey.COMM_BYTES), int),
            "exposed_share": _num(ex.get("exposed_share")), "exposed_s": _num(ex.get("exposed_s")),
            "step_time_s_min": _num(st.get("min")), "step_time_s_max": _num(st.get("max")),
            "step_time_s_max_rank": _num(st.get("max_rank"), int), "comm_time_s_max": _num(ct.get("max")),
            "comm_time_s_max_rank": _num(ct.get("max_rank"), int), StepKey.PROFILED: bool(r.get(StepKey.PROFILED, False))})
    return rows


def _rank_steps(run):
    """(the row's run, rank and step columns, the record) for every line of every rank's file."""
    name, label = os.path.basename(os.path.normpath(run.path)), run.name
    for rank, records in sorted(run.ranks.items()):
        for r in records:
            yield {"run": name, "run_name": label, "rank": rank, "step": _num(r.get(StepKey.STEP), int)}, r


def _op_columns(s: dict) -> dict:
    """One collective type's figures: a record's `comm` entry, or a process group's `by_op` one."""
    return {"count": _num(s.get("count"), int), "bytes": _num(s.get("bytes"), int), "time_s": _num(s.get("time_s")),
            "busbw_GBps": _num(s.get("busbw_GBps")), "untimed": _num(s.get("untimed"), int)}


def collective_rows(run) -> list[dict]:
    return [{**head, "op": op, **_op_columns(s), "untimed_reason": s.get("untimed_reason")}
            for head, r in _rank_steps(run) for op, s in sorted((r.get(StepKey.COMM) or {}).items())]


def group_rows(run) -> list[dict]:
    """One row per rank, step, process group and collective type; busbw at that group's size."""
    return [{**head, "group": group, "dim": g.get("dim"), "scope": g.get("scope"),
             "group_size": _num(g.get("size"), int), "op": op, **_op_columns(s)}
            for head, r in _rank_steps(run) for group, g in sorted((r.get(StepKey.COMM_GROUPS) or {}).items())
            for op, s in sorted((g.get("by_op") or {}).items())]


def call_rows(run) -> list[dict]:
    from telemetry.formulas import bus_factor

    name, label = os.path.basename(os.path.normpath(run.path)), run.name
    rows = []
    for path in rank_files(run.path, RANK_EVENTS):
        for line in read_jsonl(path):
            for op, t, dur, nbytes, size, source, *rest in line.get("calls") or ():
                bw = nbytes * bus_factor(op, max(size, 1)) / dur / 1e9 if dur else None
                rows.append({"run": name, "run_name": label, "rank": line.get("rank"), "step": line.get(StepKey.STEP),
                             "op": op, "t_issue": t, "duration_s": dur, "bytes": nbytes, "group_size": size,
                             "busbw_GBps": bw, "source": source, "group": rest[0] if rest else None})
    return rows


def write(run, out: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    steps, collectives, calls = _schemas()
    pq.write_table(pa.Table.from_pylist(step_rows(run), schema=steps), os.path.join(out, "steps.parquet"))
    pq.write_table(pa.Table.from_pylist(collective_rows(run), schema=collectives),
                   os.path.join(out, "collectives.parquet"))
    groups = group_rows(run)
    if groups:
        pq.write_table(pa.Table.from_pylist(groups, schema=_group_schema()), os.path.join(out, "groups.parquet"))
    rows = call_rows(run)
    if rows:
        pq.write_table(pa.Table.from_pylist(rows, schema=calls), os.path.join(out, "calls.parquet"))
    return out


if __name__ == "__main__":  # print the schemas (what docs/telemetry.md lists)
    for schema in _schemas():
        print(json.dumps([[f.name, str(f.type)] for f in schema]))
