"""Collective sweep in the fabric lab: busbw at large sizes as a fraction of the shaped link rate, and how
much it moves within a run (repeats) and from run to run.

    python -m bench.lab_sweep --rates 1gbit 100mbit --runs 3 --iters 10 --repeats 5 [--mtu 9000]

Each lab run sweeps all_reduce and sendrecv (and the inter-node send/recv pair) on 2 lab nodes x 1 rank,
`--min-bytes` to `--max-bytes`; every size is timed `--repeats` times after `--warmup` operations and the
row is their median (sweep.repeats). Goal (issue 11 part 7): busbw >= 90% of the shaped rate for
all_reduce and sendrecv at >= 16 MiB, in every run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from launch.lab import parse_rate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"])
    p.add_argument("--runs", type=int, default=3, help="lab runs per rate (run-to-run spread)")
    p.add_argument("--ops", default="[all_reduce,sendrecv]")
    p.add_argument("--min-bytes", default="4M")
    p.add_argument("--max-bytes", default="16M")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--repeat-stat", default="median", choices=["median", "best"], help="what each row shows")
    p.add_argument("--mtu", type=int, default=1500, help="the lab links' frame size (launch.lab --mtu)")
    p.add_argument("--goal", type=float, default=0.90)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "lab_sweep.jsonl"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in args.rates:
            link_GBps = parse_rate(rate) / 8 / 1e9  # GB/s, the unit of busbw
            for k in range(args.runs):
                out = os.path.join(tmp, f"{rate}-{k}")
                cmd = [sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", rate, "--mtu", str(args.mtu), "--",
                       "recipes/collectives.yaml", f"output_dir={out}", f"sweep.ops={args.ops}",
                       f"sweep.min_bytes={args.min_bytes}", f"sweep.max_bytes={args.max_bytes}", "sweep.factor=4",
                       f"sweep.iters={args.iters}", f"sweep.warmup={args.warmup}", f"sweep.repeats={args.repeats}",
                       f"sweep.repeat_stat={args.repeat_stat}",
                       "sweep.latency_table=false"]
                subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=3600)
                with open(os.path.join(out, "collectives.json")) as f:
                    sweep = json.load(f)
                for op, r in sweep["ops"].items():
                    for row in r["rows"]:
                        block = row["out_of_place"] or row["in_place"]
                        spread = block.get("spread") or {}
                        rows.append({"rate": rate, "run": k, "op": op, "size": row["size"],
                                     "busbw_GBps": block["busbw_GBps"], "row_is": sweep.get("repeat_stat", "median"),
                                     "fraction_of_rate": block["busbw_GBps"] / link_GBps,
                                     # the median repeat, and the best (min-max of the repeats: the spread)
                                     "repeats_fraction_min": spread.get("busbw_min_GBps", block["busbw_GBps"]) / link_GBps,
                                     "repeats_fraction_max": spread.get("busbw_max_GBps", block["busbw_GBps"]) / link_GBps})
                        x = rows[-1]
                        print(f"{rate:>8} run {k} {op:>20} {row['size']:>10} B: {x['fraction_of_rate'] * 100:.1f}% of "
                              f"the link ({x['row_is']}; repeats {x['repeats_fraction_min'] * 100:.1f}-"
                              f"{x['repeats_fraction_max'] * 100:.1f}%)", flush=True)
    big = [r for r in rows if r["size"] >= 16 * 2 ** 20]
    summary = {}
    for rate in args.rates:
        for op in sorted({r["op"] for r in big}):
            sel = [r for r in big if r["rate"] == rate and r["op"] == op]
            if sel:
                fr = [r["fraction_of_rate"] for r in sel]
                best = [r["repeats_fraction_max"] for r in sel]
                summary[f"{rate} {op}"] = {"runs": len(fr), "row_min": min(fr), "row_max": max(fr),
                                           "row_met_in": sum(f >= args.goal for f in fr),
                                           "best_min": min(best), "best_max": max(best),
                                           "best_met_in": sum(f >= args.goal for f in best),
                                           "worst_repeat": min(r["repeats_fraction_min"] for r in sel)}
    result = {"benchmark": "lab_sweep", "date": datetime.date.today().isoformat(),
              "command": " ".join(["python", *sys.argv]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores (shared)",
              "mtu": args.mtu, "goal": args.goal, "summary": summary, "rows": rows}
    print(json.dumps(summary, indent=1))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
