"""Projection per process group in the fabric lab: tp inside a node, dp across, onto a 10x slower link.

    python -m bench.lab_groups [--rounds 2] [--steps 8] [--out /tmp/lab_groups]
    python -m bench.lab_groups --nodes 3 --targets 20mbit 5mbit --rounds 1   # held-out targets

Each round runs tiny_llama_lora on 2 nodes x 2 ranks (`parallel.tp=2 parallel.dp=2
parallel.data_parallel=replicate`) at 100 Mbit/s, then at 10 Mbit/s, and projects the 100 Mbit/s run onto
10 Mbit/s twice: per group (only the inter-node dp group on the link) and as runs recorded before groups were
(every byte on the link with the world's bus factor). Prints one JSON line per round and appends it to
bench/results/lab_groups.jsonl. Needs root and iproute2 (the lab). `--nodes N` runs tp 2 x dp N on N nodes,
`--targets` measures and projects other rates than 10 Mbit/s (each target: its own line, with its error).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

from telemetry.analysis.projection import measured_profile, project  # noqa: E402
from telemetry.analysis.report import summarize  # noqa: E402
from telemetry.analysis.runs import load_run  # noqa: E402

OVERRIDES = ["parallel.tp=2", "parallel.data_parallel=replicate", "train.eval_every_samples=null",
             "train.save_final=false", "distributed.timeout_s=60"]


def lab_run(out: str, rate: str, steps: int, nodes: int = 2) -> str:
    cmd = [sys.executable, "-m", "launch.lab", "--nodes", str(nodes), "--nproc-per-node", "2", "--rate", rate, "--",
           os.path.join(REPO, "recipes", "tiny_llama_lora.yaml"), f"output_dir={out}", f"max_steps={steps}",
           f"parallel.dp={nodes}", f"train.global_batch_size={8 * nodes}", *OVERRIDES]  # 2 micro-batches per rank
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"lab run at {rate} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default="/tmp/lab_groups")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--targets", nargs="+", default=["10mbit"], help="target rates (default 10mbit)")
    args = ap.parse_args()
    from launch.lab import parse_rate
    for k in range(args.rounds):
        fast = lab_run(os.path.join(args.out, f"r{k}-n{args.nodes}-100mbit"), "100mbit", args.steps, args.nodes)
        base = load_run(fast)
        prof = measured_profile(base)
        for rate in args.targets:
            slow = lab_run(os.path.join(args.out, f"r{k}-n{args.nodes}-{rate}"), rate, args.steps, args.nodes)
            _report(k, args.nodes, rate, parse_rate(rate), base, prof, load_run(slow))


def _median(values: list) -> float | None:
    values = sorted(v for v in values if v is not None)
    return values[len(values) // 2] if values else None


def _report(k: int, nodes: int, rate: str, bps: float, base, prof: dict, target) -> None:
        burst = target.info["fabric"]["lab"].get("burst_bytes") or 0
        grouped = project(prof, bps, burst_bytes=burst)
        flat = project({**prof, "groups": {}}, bps, burst_bytes=burst)
        st = summarize(target)
        measured_dp = st["comm_groups"]["dp"]["time_per_step_s"]
        line = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "round": k, "nodes": nodes,
                "target": rate, "dp_link_sharing": grouped["by_group"]["dp"].get("link_sharing"),
                "measured_100mbit_s": summarize(base)["step_time_median_s"],
                "measured_target_s": st["step_time_median_s"],
                "error": grouped["step_time_s"] / st["step_time_median_s"] - 1,
                "interval_holds": grouped["interval_s"][0] <= st["step_time_median_s"] <= grouped["interval_s"][1],
                "projected_groups_s": grouped["step_time_s"], "interval_s": grouped["interval_s"],
                "projected_flat_s": flat["step_time_s"],
                "dp_projected_s": grouped["by_group"]["dp"]["predicted_s"], "dp_measured_rank0_s": measured_dp,
                # the dp share of the cross-rank minimum all_reduce time, as the projection reads a run
                "dp_measured_min_s": measured_profile(target)["groups"]["dp"]["ops"]["all_reduce"]["time_s"],
                "tp_projected_s": grouped["by_group"]["tp"]["predicted_s"],
                "tp_measured_target_s": st["comm_groups"]["tp"]["time_per_step_s"],
                "bytes": {n: g["bytes_per_step"] for n, g in st["comm_groups"].items()},
                # the lab's wire counters (every host's interface: IP/TCP headers and the harness's own traffic
                # included) against the groups' bytes x bus factor x link sharing, over every node's link
                "wire_counter_bytes_per_step": _median([r.get("job_net_tx_bytes") for r in target.timed_steps()]),
                "group_link_bytes_per_step": nodes * sum(g["wire_bytes"] for g in grouped["by_group"].values()
                                                         if g["on_target_link"])}
        print(json.dumps(line), flush=True)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "lab_groups.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
