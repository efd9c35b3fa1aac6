"""Collective sweep in the fabric lab: busbw at large sizes as a fraction of the shaped link rate.

    python bench/lab_sweep.py --rates 1gbit 100mbit --max-bytes 32M

Goal (issue 5): >= 90% for all_reduce and sendrecv at large sizes.
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
sys.path.insert(0, REPO)

from launch.lab import parse_rate  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", nargs="+", default=["1gbit", "100mbit"])
    p.add_argument("--ops", default="[all_reduce,sendrecv,all_gather,all_to_all]")
    p.add_argument("--min-bytes", default="1M")
    p.add_argument("--max-bytes", default="32M")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "lab_sweep.jsonl"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in args.rates:
            out = os.path.join(tmp, rate)
            cmd = [sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", rate, "--",
                   "recipes/collectives.yaml", f"output_dir={out}", f"sweep.ops={args.ops}",
                   f"sweep.min_bytes={args.min_bytes}", f"sweep.max_bytes={args.max_bytes}", "sweep.factor=4",
                   f"sweep.iters={args.iters}", "sweep.warmup=1", "sweep.latency_iters=50"]
            subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=3600)
            with open(os.path.join(out, "collectives.json")) as f:
                sweep = json.load(f)
            link_gbps = parse_rate(rate) / 8 / 1e9  # GB/s, the unit of busbw
            for op, r in sweep["ops"].items():
                largest = r["rows"][-1]
                block = largest["out_of_place"] or largest["in_place"]
                rows.append({"rate": rate, "op": op, "size": largest["size"], "busbw_gbps": block["busbw_gbps"],
                             "fraction_of_rate": block["busbw_gbps"] / link_gbps})
                print(f"{rate:>8} {op:>20} {largest['size']:>10} B: busbw {block['busbw_gbps'] * 1e3:.2f} MB/s = "
                      f"{rows[-1]['fraction_of_rate'] * 100:.1f}% of the link", flush=True)
            rows.append({"rate": rate, "latency_us": sweep.get("latency_us")})
    result = {"benchmark": "lab_sweep", "date": datetime.date.today().isoformat(),
              "command": " ".join(["python", *sys.argv]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores", "rows": rows}
    print(json.dumps(result, indent=1))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
