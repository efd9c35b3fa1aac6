"""Projection from a run measured on ONE node onto nodes joined by a shaped link, against lab runs there.

The baseline is tiny_llama_lora with 2 ranks on one host (torchrun, no lab: the ranks talk over loopback, no
link to shape). It is projected onto 2 nodes x 1 rank at each rate (`project(..., nodes=2, ranks_per_node=1)`,
what `python -m telemetry project RUN --rate R --nodes 2 --ranks-per-node 1` prints), where the dp group that
was inside the one node spans both (telemetry/analysis/projection.py, `from_intra`). Each target is then run in
the fabric lab (`launch.lab --nodes 2 --nproc-per-node 1 --rate R`): the same world, the same per-rank batch,
so only the link changes.

    python -m bench.lab_projection_one_node --runs-dir /tmp/proj1n --repeats 3          # run, then evaluate
    python -m bench.lab_projection_one_node --runs-dir /tmp/proj1n --repeats 3 --reuse  # evaluate runs kept

Runs are made in rounds (round k: the baseline, then each target once) as in bench/lab_projection.py, so that
slow and fast stretches of a shared host fall on baseline and targets alike; the projection is made from the
baseline's repeats together and compared with the median of each target's repeats.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from bench.lab_projection import lab_run  # noqa: E402
from telemetry.analysis.projection import LAB_EFFICIENCY, combine_profiles, measured_profile, project  # noqa: E402
from telemetry.analysis.report import summarize  # noqa: E402
from telemetry import rundir  # noqa: E402
from telemetry.analysis.runs import load_run  # noqa: E402

RECIPE = "tiny_llama_lora"
RECIPE_ARGS = ["train.eval_every_samples=null", "train.save_final=false", "train.resume=never",
               "train.save_every=0", "distributed.timeout_s=120"]


def one_node_run(args, tag: str) -> tuple[str, float | None]:
    """tiny_llama_lora, 2 ranks on this host (torchrun --standalone): the one-node baseline."""
    out = os.path.join(args.runs_dir, f"{RECIPE}-1node-x2{tag}")
    if args.reuse and os.path.exists(os.path.join(out, "run.json")):
        with open(os.path.join(out, "run.json")) as f:
            if json.load(f).get("status") == "completed":
                return out, None
    cmd = [sys.executable, "-m", "launch.torchrun", "--standalone", "--nproc-per-node", "2", "-m", "trainer",
           f"recipes/{RECIPE}.yaml", f"output_dir={out}", f"max_steps={args.steps}", *RECIPE_ARGS]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(f"one-node run failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return out, time.monotonic() - t0


def _row(rate: str, base: dict, base_profiles: list[dict], runs: list) -> dict:
    lab = runs[0].info["fabric"]["lab"]
    each = [summarize(r)["step_time_median_s"] for r in runs]
    measured = statistics.median(each)
    profiles = [measured_profile(r) for r in runs]
    measured_comm = statistics.median(m["comm_time_s"] for m in profiles)
    # the step less its exposed communication: the compute the host gave this target (drifts between runs)
    measured_compute = statistics.median(m["step_time_s"] - m["exposed_s"] for m in profiles)
    kw = {"burst_bytes": lab["burst_bytes"], "nodes": 2, "ranks_per_node": 1}
    pr = project(base, lab["rate_bps"], **kw)
    lo, hi = pr["interval_s"]
    single = [(project(bp, lab["rate_bps"], **kw)["step_time_s"] - m) / m for bp, m in zip(base_profiles, each)]
    # the baseline ran off the lab, so project() takes the off-lab efficiency (0.94); the target's 1500-byte
    # frames over tbf reach 0.90 (bench/lab_sweep.py): what `--efficiency 0.9` gives
    at_lab = project(base, lab["rate_bps"], efficiency=LAB_EFFICIENCY[lab.get("mtu") or 1500], **kw)
    dp = pr["by_group"].get("dp") or {}
    return {"rate": rate, "rate_bps": lab["rate_bps"], "burst_bytes": lab["burst_bytes"],
            "efficiency": pr["efficiency"], "baseline_s": base["step_time_s"],
            "baseline_runs_s": base.get("repeat_step_times_s") or [base["step_time_s"]],
            "baseline_comm_s": base["comm_time_s"], "dp_on_target_link": dp.get("on_target_link"),
            "dp_size_new": dp.get("size_new"), "predicted_s": pr["step_time_s"], "interval_s": [lo, hi],
            "measured_s": measured, "measured_runs_s": each, "error": (pr["step_time_s"] - measured) / measured,
            "inside": lo <= measured <= hi, "single_pair_errors": single,
            "predicted_comm_s": pr["comm_time_s"], "measured_comm_s": measured_comm,
            "predicted_compute_s": pr["compute_s"], "measured_compute_s": measured_compute,
            "lab_efficiency": at_lab["efficiency"], "predicted_lab_eff_s": at_lab["step_time_s"],
            "predicted_lab_eff_comm_s": at_lab["comm_time_s"],
            "error_lab_eff": (at_lab["step_time_s"] - measured) / measured,
            "comm_error": (pr["comm_time_s"] - measured_comm) / measured_comm if measured_comm else None,
            "tbf_drops": [_lab_record(r).get("tbf_drops") for r in runs]}


def _lab_record(run) -> dict:
    """The lab's own record beside the run (launch.lab: tbf counters kept before tear-down)."""
    path = os.path.join(run.path, rundir.LAB)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", nargs="+", default=["10mbit", "50mbit", "200mbit"])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3, help="runs of the baseline and of each target, in rounds")
    p.add_argument("--runs-dir", required=True, help="run directories are kept here")
    p.add_argument("--reuse", action="store_true", help="use completed runs already in --runs-dir")
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "lab_projection_one_node.jsonl"))
    args = p.parse_args()
    bases, runs = [], {r: [] for r in args.rates}
    started = datetime.datetime.now(datetime.timezone.utc)
    for k in range(args.repeats):
        tag = f"-r{k}" if args.repeats > 1 else ""
        base_dir, secs = one_node_run(args, tag)
        bases.append(load_run(base_dir))
        print(f"round {k}: baseline 1 node x 2 ranks {summarize(bases[-1])['step_time_median_s']:.4f} s/step"
              + (f" ({secs:.0f} s)" if secs else " (kept)"), flush=True)
        for rate in args.rates:
            out, secs = lab_run(args, RECIPE, rate, 2, tag)
            runs[rate].append(load_run(out))
            print(f"  {rate:>8} 2 nodes x 1: {summarize(runs[rate][-1])['step_time_median_s']:.4f} s/step"
                  + (f" ({secs:.0f} s)" if secs else " (kept)"), flush=True)
    base_profiles = [measured_profile(b) for b in bases]
    base = combine_profiles(base_profiles)
    rows = []
    for rate in args.rates:
        row = _row(rate, base, base_profiles, runs[rate])
        rows.append(row)
        lo, hi = row["interval_s"]
        print(f"  {rate:>8}: predicted {row['predicted_s']:.4f} s [{lo:.4f}, {hi:.4f}], measured "
              f"{row['measured_s']:.4f} s ({', '.join(f'{t:.4f}' for t in row['measured_runs_s'])}), error "
              f"{row['error'] * 100:+.1f}% {'in' if row['inside'] else 'OUT'}; communication "
              f"{row['predicted_comm_s']:.4f} s vs {row['measured_comm_s']:.4f} s; single pairs "
              + " ".join(f"{e * 100:+.1f}%" for e in row["single_pair_errors"]), flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    errors = [abs(r["error"]) for r in rows]
    # when the runs ended (run.json's last write): with --reuse, earlier than `date` and `started_utc`
    ended = sorted(os.path.getmtime(os.path.join(r.path, rundir.RUN_JSON)) for r in bases + sum(runs.values(), []))
    made = [datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M") for t in ended]
    result = {"benchmark": "lab_projection_one_node", "date": started.date().isoformat(),
              "started_utc": started.strftime("%H:%M"), "runs_ended_utc": [made[0], made[-1]], "commit": commit,
              "command": " ".join(["python", "-m", "bench.lab_projection_one_node", *sys.argv[1:]]),
              "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores (shared)",
              "load_avg_at_end": os.getloadavg(), "recipe": f"recipes/{RECIPE}.yaml", "steps": args.steps,
              "repeats": args.repeats, "baseline": "1 node x 2 ranks, torchrun --standalone (loopback)",
              "target": "2 nodes x 1 rank, launch.lab (veth + tc tbf)",
              "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
              "interval_coverage": sum(r["inside"] for r in rows) / len(rows), "rows": rows}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
