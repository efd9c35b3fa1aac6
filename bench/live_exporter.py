"""The live exporter's cost: the same run with telemetry.prometheus off and on (scraped), and the cost of one
scrape.

1. Per-step cost: tiny_llama_lora under torchrun, `telemetry.prometheus` off vs `auto` with a scraper
   reading /metrics every `--scrape-every` seconds (Prometheus' usual interval is 15-30 s; 1 s is harsh),
   interleaved rounds; per-step wall time between consecutive steps' stamps (`time` in metrics.jsonl), so
   anything the exporter costs the ranks (the scrape's thread holding the GIL of local rank 0) is in it.
2. Scrapes against quiet, in one run (`--windows`): the exporter on throughout, a scraper hammering it every
   0.1 s in alternate 3 s windows and idle in the others; the steps that ended in each kind of window are
   compared, so the machine's load, which drifts between runs, is the same for both.
3. Scrape cost: in this process, RunSeries (telemetry/capture/live_series.py) over rank files of
   `--ranks` ranks with `--groups` process groups x 3 collective types, `--new` new lines per rank since
   the last scrape: milliseconds per scrape and the exposition's size.

    python -m bench.live_exporter --nproc 2 --steps 40 --rounds 3 --scrape-every 1
    python -m bench.live_exporter --windows --steps 200
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
import threading
import time
import urllib.request

from bench.support.torchrun_runs import add_run_options, step_gaps, train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train_while(args, out: str, extra: list[str], scraper, stop: threading.Event, timeout: int) -> None:
    """The recipe under torchrun into `out` (overrides `extra` added) while `scraper` runs in a thread; `stop`
    is set when the run ends, and the scraper is waited for."""
    t = threading.Thread(target=scraper, daemon=True)
    t.start()
    try:
        train(args.recipe, args.nproc, args.steps, out, extra, timeout=timeout)
    finally:
        stop.set()
        t.join()


def run_once(args, exporter: bool, workdir: str) -> tuple[list[float], int]:
    out = os.path.join(workdir, f"run-{'on' if exporter else 'off'}-{len(os.listdir(workdir))}")
    os.makedirs(os.path.join(out, "logs"))
    scrapes = [0]
    stop = threading.Event()

    def scrape():
        while not stop.wait(args.scrape_every):
            for path in glob.glob(os.path.join(out, "logs", "prometheus-targets.*.json")):
                try:
                    with open(path) as f:
                        target = json.load(f)[0]["targets"][0]
                    urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read()
                    scrapes[0] += 1
                except (OSError, ValueError, IndexError, KeyError):
                    pass
    _train_while(args, out, ["telemetry.prometheus=auto"] if exporter else [], scrape, stop, timeout=900)
    return step_gaps(out)[args.skip:], scrapes[0]


def windows(args, workdir: str) -> dict:
    out = os.path.join(workdir, "windows")
    os.makedirs(os.path.join(out, "logs"))
    spans: list[tuple[float, float, bool]] = []  # (start, end, scraped)
    stop = threading.Event()
    count = [0]

    def scraper():
        target = None
        while target is None and not stop.is_set():
            for path in glob.glob(os.path.join(out, "logs", "prometheus-targets.*.json")):
                with open(path) as f:
                    target = json.load(f)[0]["targets"][0]
            stop.wait(0.2)
        scraped = False
        while not stop.is_set():
            t0 = time.time()
            while time.time() - t0 < 3.0 and not stop.is_set():
                if scraped:
                    try:
                        urllib.request.urlopen(f"http://{target}/metrics", timeout=5).read()
                        count[0] += 1
                    except OSError:
                        pass
                    time.sleep(0.1)
                else:
                    time.sleep(0.05)
            spans.append((t0, time.time(), scraped))
            scraped = not scraped
    _train_while(args, out, ["telemetry.prometheus=auto"], scraper, stop, timeout=1800)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        lines = [json.loads(x) for x in f][args.skip:]
    by = {True: [], False: []}
    for line in lines:
        end, start = line["time"], line["time"] - line["step_time_s"]
        for a, b, scraped in spans:
            if a <= start and end <= b:  # the whole step inside one window
                by[scraped].append(line["step_time_s"])
    return {"kind": "windows", "steps_scraped": len(by[True]), "steps_quiet": len(by[False]), "scrapes": count[0],
            "ms_per_step_scraped": statistics.median(by[True]) * 1e3 if by[True] else None,
            "ms_per_step_quiet": statistics.median(by[False]) * 1e3 if by[False] else None}


def scrape_cost(ranks: int, groups: int, new: int, repeats: int = 20) -> dict:
    from prometheus_client import CollectorRegistry, generate_latest

    from telemetry.capture.live_series import RunSeries
    from telemetry.rundir import rank_file

    ops = ("all_reduce", "all_gather", "reduce_scatter")
    by_op = {op: {"count": 10, "bytes": 1 << 20, "time_s": 0.01, "untimed": 0, "untimed_bytes": 0, "busbw_GBps": 100.0}
             for op in ops}
    line = {"step_time_s": 1.0, "comm_time_s": 0.3, "exposed_comm_s": 0.1, "gpu_energy_j": 500.0, "gpu_power_w": 500.0,
            "comm": by_op, "comm_groups": {f"g{i}": {"scope": "inter", "by_op": by_op} for i in range(groups)}}
    times = []
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "ranks"))
        series = RunSeries(d, list(range(ranks)), {"job": "j", "run": "r", "host": "h"}, job_metrics=False)
        reg = CollectorRegistry(auto_describe=False)
        reg.register(series)
        step = 0
        for _ in range(repeats):
            for r in range(ranks):
                with open(os.path.join(d, rank_file(r, "telemetry.jsonl")), "a") as f:
                    for k in range(new):
                        f.write(json.dumps({"step": step + k, **line}) + "\n")
            step += new
            t0 = time.perf_counter()
            text = generate_latest(reg)
            times.append(time.perf_counter() - t0)
    return {"ranks": ranks, "groups": groups, "new_lines_per_rank": new, "scrape_ms_median": statistics.median(times) * 1e3,
            "exposition_bytes": len(text), "samples": text.count(b"\n") - text.count(b"\n#")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(p, steps=40, skip=5)
    p.add_argument("--scrape-every", type=float, default=1.0)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--groups", type=int, default=3)
    p.add_argument("--windows", action="store_true", help="one run, scraped every 0.1 s in alternate 3 s windows")
    args = p.parse_args()
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
             "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "command": " ".join(sys.argv)}
    if args.windows:
        with tempfile.TemporaryDirectory() as workdir:
            row = {**stamp, **windows(args, workdir)}
        print(json.dumps(row))
        with open(os.path.join(REPO, "bench", "results", "live_exporter.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        return
    results = {"off": [], "on": []}
    scrapes = 0
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                steps, n = run_once(args, mode == "on", workdir)
                results[mode].append(statistics.median(steps))
                scrapes += n
                print(f"round {r + 1} {mode}: {statistics.median(steps) * 1e3:.1f} ms/step", flush=True)
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    row = {**stamp, "kind": "per_step", "ms_per_step_off": off * 1e3, "ms_per_step_on": on * 1e3, "ratio": on / off,
           "per_round_off_ms": [x * 1e3 for x in results["off"]], "per_round_on_ms": [x * 1e3 for x in results["on"]],
           "scrapes": scrapes, "scrape_every_s": args.scrape_every}
    print(json.dumps(row))
    rows = [row]
    for new in (1, 15):
        cost = {**stamp, "kind": "scrape", **scrape_cost(args.ranks, args.groups, new)}
        print(json.dumps(cost))
        rows.append(cost)
    with open(os.path.join(REPO, "bench", "results", "live_exporter.jsonl"), "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
