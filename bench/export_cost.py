"""Cost of telemetry.export: step time with the trace's events file on vs off (runs interleaved, one
session), bytes the events file takes per step and rank, and seconds each exporter takes at the end.

    python -m bench.export_cost --nproc 2 --steps 30 --rounds 3
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from bench.support.torchrun_runs import add_run_options, step_gaps, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_once(recipe: str, nproc: int, steps: int, export: str, workdir: str) -> tuple[str, list[float]]:
    out = os.path.join(workdir, f"run-{len(os.listdir(workdir))}")
    train(recipe, nproc, steps, out, [f"telemetry.export={export}"])
    return out, step_gaps(out)


def write_cost_us(calls_per_step: int, steps: int = 2000) -> float:
    """Microseconds Telemetry adds per step for the events file (marks + one line), CPU only, no job."""
    from telemetry.capture.collectives import Call
    from telemetry.capture.session import Telemetry, TelemetrySettings

    with tempfile.TemporaryDirectory() as d:
        tel = Telemetry(TelemetrySettings(export=["trace"], cross_rank_every=0), d)
        tel.start()
        tel._t_step = time.perf_counter()
        calls = [Call("all_reduce", 1 << 20, 8, "gloo", "ddp", time.perf_counter(), duration_s=1e-3)
                 for _ in range(calls_per_step)]
        t0 = time.perf_counter()
        for step in range(steps):
            for m in ("backward_begin", "backward_end", "optimizer_begin", "optimizer_end"):
                tel.mark(m)
            tel._write_events(step, time.perf_counter(), calls)
        cost = (time.perf_counter() - t0) / steps * 1e6
        tel.s.export = None  # no run directory to export from
        tel.close()
    return cost


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(p, steps=30, skip=3)
    a = p.parse_args()
    from telemetry.analysis.exports import export_run

    off, on, last = [], [], None
    with tempfile.TemporaryDirectory() as work:
        for _ in range(a.rounds):
            off += run_once(a.recipe, a.nproc, a.steps, "[]", work)[1][a.skip:]
            last, steps = run_once(a.recipe, a.nproc, a.steps, "[trace]", work)
            on += steps[a.skip:]
        events = glob.glob(os.path.join(last, "ranks", "rank*.events.jsonl"))
        per_step = statistics.mean(os.path.getsize(e) for e in events) / a.steps
        seconds = {}
        for kind in ("parquet", "trace", "tensorboard", "wandb"):
            t0 = time.perf_counter()
            r = export_run(last, [kind], os.path.join(work, "x"))
            seconds[kind] = round(time.perf_counter() - t0, 3) if not r[kind].get("error") else r[kind]["error"]
    result = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "date": str(datetime.date.today()),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
              "median_step_s_off": statistics.median(off), "median_step_s_trace": statistics.median(on),
              "trace_vs_off": statistics.median(on) / statistics.median(off) - 1,
              "events_bytes_per_step_per_rank": round(per_step), "export_seconds": seconds,
              "steps_compared": [len(off), len(on)],
              "events_write_us_per_step": {n: round(write_cost_us(n), 1) for n in (3, 100, 1000)}}
    print(json.dumps(result, indent=1))
    with open(os.path.join(REPO, "bench", "results", "export_cost.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
