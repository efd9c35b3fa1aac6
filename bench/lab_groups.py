"""Projection per process group in the fabric lab: tp inside a node, dp across, onto slower links.

    python -m bench.lab_groups [--repeats 2] [--steps 8] [--out /tmp/lab_groups]
    python -m bench.lab_groups --nodes 3 --targets 7mbit 14mbit --repeats 3 --phase held-out

tiny_llama_lora on N nodes x 2 ranks (`parallel.tp=2 parallel.dp=N parallel.data_parallel=replicate`):
a baseline at 100 Mbit/s and each target rate, in rounds (round k: the baseline, then every target once,
so that slow and fast stretches of the shared host fall on baselines and targets alike). The baselines'
repeats are projected together (`telemetry project RUN RUN RUN`: medians, the interval widened to hold
their spread) onto each target, per group (only the inter-node dp group on the link) and as runs recorded
before groups were (every byte on the link with the world's bus factor), and compared with the median of
the target's repeats. One JSON line per target, appended to bench/results/lab_groups.jsonl, with:

- `phase`: `tune` (configurations looked at while changing the model) or `held-out` (never looked at
  while changing it; bench/results/lab_groups.md says which is which);
- each run's error alone (the baselines' median against each target run) and the load average around
  each run (the host is shared);
- packets dropped by the shaped links' tbf queues per run (`tbf_drops`, from lab.json);
- the wire accounting (`wire`): the lab's interface counters per node and step (bytes and frames) against
  the groups' bytes x bus factor x link sharing. Each frame carries 66 bytes of headers (Ethernet 14, IPv4
  20, TCP 20 + the timestamp option 12; pure ACKs are only that), so payload = bytes - 66 x frames, and
  what payload is left over the groups' bytes is traffic the step's collectives do not count: gloo's
  message headers and the harness's own exchanges between steps (cross-rank tree, stop vote).

Needs root and iproute2 (the lab).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

from bench.support.results import append_result  # noqa: E402
from telemetry.analysis.fabric_summary import lab_tbf_drops  # noqa: E402
from telemetry.analysis.projection import combine_profiles, measured_profile, project  # noqa: E402
from telemetry.analysis.report import summarize  # noqa: E402
from telemetry.analysis.runs import Run, load_run  # noqa: E402

OVERRIDES = ["parallel.tp=2", "parallel.data_parallel=replicate", "train.eval_every_samples=null",
             "train.save_final=false", "distributed.timeout_s=60"]
BASELINE = "100mbit"
# Ethernet (14) + IPv4 (20) + TCP (20) + TCP timestamps (12): the bytes each frame adds on the lab's links
FRAME_HEADER_BYTES = 66


def lab_run(out: str, rate: str, steps: int, nodes: int = 2) -> str:
    cmd = [sys.executable, "-m", "launch.lab", "--nodes", str(nodes), "--nproc-per-node", "2", "--rate", rate, "--",
           os.path.join(REPO, "recipes", "tiny_llama_lora.yaml"), f"output_dir={out}", f"max_steps={steps}",
           f"parallel.dp={nodes}", f"train.global_batch_size={8 * nodes}", *OVERRIDES]  # 2 micro-batches per rank
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"lab run at {rate} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return out


def wire_accounting(run: Run, link_bytes_per_node: float) -> dict:
    """Per node and step (then the mean over nodes): interface bytes and frames, their headers, and the
    payload beyond the groups' link bytes. The sampler's windows are not the steps: each ends up to a sampling
    interval (0.1 s) before its step does, so one step's figure can miss its own burst of dp traffic (at the
    end of backward) and hold the step before's (at 10 Mbit/s, 0.1 s is 125 kB: more than the step's dp
    bytes), and a median of a few steps' figures with it. The windows are back to back (a step with no new
    sample passes its traffic to the next), so the sum over steps 2 on, over their count, is off by at most
    one burst over the whole run: the figure steadies as the run lengthens.
    The counters count the packets the kernel hands the veth: where tbf's burst is larger than a
    segmentation-offload packet (100 Mbit/s: 25 kB) one counted frame carries several wire frames' payload,
    and only the slow links' figures (tbf segments whatever exceeds its 16 KiB burst) read as frames."""
    nodes = []
    for recs in run.ranks.values():
        tx = frames = steps = 0
        for i, r in enumerate(r for r in recs if (r.get("step") or 0) >= 2):
            c = ((r.get("host") or {}).get("counters") or {}).get("net:fab0")
            if c:  # the steps before it with no new sample are in its window
                tx, frames, steps = tx + c["tx_bytes"], frames + c["tx_packets"], i + 1
        if steps:
            nodes.append((tx / steps, frames / steps))
    if not nodes:
        return {}
    tx = statistics.mean(t for t, _ in nodes)
    frames = statistics.mean(f for _, f in nodes)
    payload = tx - FRAME_HEADER_BYTES * frames
    return {"tx_bytes": round(tx), "frames": round(frames), "header_bytes": round(FRAME_HEADER_BYTES * frames),
            "payload_bytes": round(payload), "group_link_bytes": round(link_bytes_per_node),
            "uncounted_payload_bytes": round(payload - link_bytes_per_node),
            "tx_over_group_bytes": round(tx / link_bytes_per_node, 3) if link_bytes_per_node else None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", "--rounds", type=int, default=2, help="rounds of the baseline and every target")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default="/tmp/lab_groups")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--targets", nargs="+", default=["10mbit"], help="target rates (default 10mbit)")
    ap.add_argument("--phase", choices=["tune", "held-out"], default="tune",
                    help="tune: looked at while changing the model; held-out: never (bench/results/lab_groups.md)")
    args = ap.parse_args()
    from launch.lab import parse_rate
    runs: dict[str, list[tuple[Run, tuple]]] = {r: [] for r in [BASELINE, *args.targets]}
    for k in range(args.repeats):
        for rate in [BASELINE, *args.targets]:
            before = os.getloadavg()[0]
            out = lab_run(os.path.join(args.out, f"r{k}-n{args.nodes}-{rate}"), rate, args.steps, args.nodes)
            runs[rate].append((load_run(out), (round(before, 2), round(os.getloadavg()[0], 2))))
    bases = [r for r, _ in runs[BASELINE]]
    prof = combine_profiles([measured_profile(b) for b in bases])
    for rate in args.targets:
        _report(args, rate, parse_rate(rate), prof, bases, runs)


def _report(args, rate: str, bps: float, prof: dict, bases: list[Run], runs: dict) -> None:
    targets = [r for r, _ in runs[rate]]
    burst = targets[0].info["fabric"]["lab"].get("burst_bytes") or 0
    grouped = project(prof, bps, burst_bytes=burst)
    flat = project({**prof, "groups": {}}, bps, burst_bytes=burst)
    measured = [summarize(t)["step_time_median_s"] for t in targets]
    observed = statistics.median(measured)
    lo, hi = grouped["interval_s"]
    link_per_node = sum(g["wire_bytes"] for g in grouped["by_group"].values() if g["on_target_link"])
    dp_target = [measured_profile(t)["groups"]["dp"]["ops"]["all_reduce"]["time_s"] for t in targets]
    append_result(os.path.join(HERE, "results", "lab_groups.jsonl"), "bench.lab_groups", {
        "phase": args.phase, "nodes": args.nodes, "target": rate, "repeats": len(targets), "steps": args.steps,
        "dp_link_sharing": grouped["by_group"]["dp"].get("link_sharing"),
        "measured_baseline_s": [round(summarize(b)["step_time_median_s"], 4) for b in bases],
        "measured_target_s": [round(m, 4) for m in measured], "measured_target_median_s": round(observed, 4),
        "projected_s": round(grouped["step_time_s"], 4), "interval_s": [round(lo, 4), round(hi, 4)],
        "error": round(grouped["step_time_s"] / observed - 1, 4), "interval_holds": lo <= observed <= hi,
        # every target run alone against the projection from the baselines together
        "errors_each": [round(grouped["step_time_s"] / m - 1, 4) for m in measured],
        "holds_each": [lo <= m <= hi for m in measured],
        "load_1min": {"baseline": [ld for _, ld in runs[BASELINE]], "target": [ld for _, ld in runs[rate]]},
        "projected_flat_s": round(flat["step_time_s"], 4),
        "dp_projected_s": round(grouped["by_group"]["dp"]["predicted_s"], 4),
        # the dp share of the cross-rank minimum all_reduce time, as the projection reads a run
        "dp_measured_min_s": [round(t, 4) for t in dp_target],
        "compute_projected_s": round(grouped["compute_s"], 4),
        "bytes": {n: g["bytes"] for n, g in grouped["by_group"].items()},
        "wire": [wire_accounting(t, link_per_node) for t in targets],
        # packets the shaped links' queues dropped in each run (lab.json, read from tc before tear-down)
        "tbf_drops": {"baseline": [lab_tbf_drops(b) for b in bases],
                      "target": [lab_tbf_drops(t) for t in targets]}})



if __name__ == "__main__":
    main()
