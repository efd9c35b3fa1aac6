"""Projection accuracy in the fabric lab: measure one run unshaped, predict the others, compare.

Runs a recipe on 2 emulated nodes with unshaped links and at each --rate, then projects the unshaped
run's iteration time onto every rate (telemetry/projection.py) and records predicted vs measured.
Goal (issue 5): within 10% at three shaped rates.

    python bench/lab_projection.py --rates 10mbit 4mbit 2mbit --steps 16 [key=value ...]
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

from telemetry.projection import measured_profile, project  # noqa: E402
from telemetry.report import summarize  # noqa: E402
from telemetry.runs import load_run  # noqa: E402


def lab_run(rate: str, out: str, args) -> None:
    cmd = [sys.executable, "-m", "launch.lab", "--nodes", str(args.nodes), "--nproc-per-node", str(args.nproc),
           "--rate", rate, "--", args.recipe, f"output_dir={out}", f"max_steps={args.steps}",
           "train.eval_every_samples=null", "train.save_final=false", "train.resume=never", *args.overrides]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=1800)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="recipes/tiny_llama_lora.yaml")
    p.add_argument("--rates", nargs="+", default=["10mbit", "4mbit", "2mbit"])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--nproc", type=int, default=1)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "lab_projection.jsonl"))
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = os.path.join(tmp, "none")
        lab_run("none", base_dir, args)
        base = measured_profile(load_run(base_dir))
        rows = []
        for rate in args.rates:
            out = os.path.join(tmp, rate)
            lab_run(rate, out, args)
            run = load_run(out)
            links = run.info["fabric"]["lab"]
            measured = summarize(run)["step_time_median_s"]
            predicted = project(base, links["rate_bps"], burst_bytes=links["burst_bytes"])["step_time_s"]
            rows.append({"rate": rate, "predicted_s": predicted, "measured_s": measured,
                         "error": (predicted - measured) / measured})
            print(f"{rate:>8}: predicted {predicted:.4f} s, measured {measured:.4f} s, "
                  f"error {rows[-1]['error'] * 100:+.1f}%", flush=True)
    result = {"benchmark": "lab_projection", "date": datetime.date.today().isoformat(),
              "command": " ".join(["python", *sys.argv]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
              "recipe": args.recipe, "nodes": args.nodes, "nproc_per_node": args.nproc, "steps": args.steps,
              "baseline_step_s": base["step_time_s"], "rates": rows,
              "max_abs_error": max(abs(r["error"]) for r in rows)}
    print(json.dumps(result, indent=1))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
