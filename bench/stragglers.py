"""Straggler detection in the fabric lab: how soon it names a slow link or a slow rank, and whether a
healthy run stays quiet.

Three runs of a recipe on 2 emulated nodes (1 rank each, links at --rate): a healthy run of
--healthy-steps, one with node --slow-node's egress shaped at --slow-rate, and one with rank --slow-rank
delayed by --delay-s per step. Each run's run.json `telemetry.stragglers` is read, and the healthy run's
metrics are replayed through the detector to show how close it came to a finding (its margin).

    python -m bench.stragglers --healthy-steps 500 --steps 40      # as root; writes bench/results/stragglers.md
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
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from telemetry import stragglers  # noqa: E402


def lab_run(out: str, steps: int, lab_args: list[str], overrides: list[str], args) -> tuple[dict, float]:
    cmd = [sys.executable, "-m", "launch.lab", "--nodes", "2", "--rate", args.rate, *lab_args, "--", args.recipe,
           f"output_dir={out}", f"max_steps={steps}", "data.seq_len=128", "train.eval_every_samples=null",
           "train.save_final=false", "train.resume=never", "distributed.timeout_s=120", *overrides]
    t0 = time.time()
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, timeout=3600)
    with open(os.path.join(out, "run.json"), encoding="utf-8") as f:
        return json.load(f), time.time() - t0


def margin(run_dir: str, hosts: list[str]) -> dict:
    """The healthy run replayed: the largest share of a full compute window (>= COMPUTE_WINDOW steps spanning
    >= COMPUTE_SPAN_S) that flagged one rank, and the most slow probes of one host in a probe window."""
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8")]
    det = stragglers.StragglerDetector(hosts)
    worst = {"compute": (0, 0), "network": 0}
    for r in rows:
        det.feed(r["step"], r)
        window = det._compute
        if det.compute_window_full:
            for rank in {s[1] for s in window if s[1] is not None}:
                n = sum(1 for s in window if s[1] == rank)
                if n / len(window) > worst["compute"][0] / max(worst["compute"][1], 1):
                    worst["compute"] = (n, len(window))
        for rank in {s[1] for s in det._link if s[1] is not None}:
            worst["network"] = max(worst["network"], sum(1 for s in det._link if s[1] == rank))
    flagged_steps = sum(1 for r in rows if (c := stragglers._outlier((r.get("ranks") or {}).get("compute_s")))
                        and c[1] >= stragglers.COMPUTE_RATIO * c[2])
    return {"steps": len(rows), "compute_flags_max_in_window": worst["compute"][0],
            "compute_window_steps": worst["compute"][1],
            "compute_steps_flagged": flagged_steps, "network_flags_max_in_window": worst["network"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", default="recipes/tiny_llama_lora.yaml")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--healthy-steps", type=int, default=500)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--slow-node", type=int, default=1)
    p.add_argument("--slow-rate", default="10mbit")
    p.add_argument("--slow-rank", type=int, default=1)
    p.add_argument("--delay-s", type=float, default=0.5)
    p.add_argument("--out", default=os.path.join(REPO, "bench", "results", "stragglers.md"))
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="stragglers-")
    cases = [("healthy", args.healthy_steps, [], []),
             ("slow link", args.steps, ["--slow-node", str(args.slow_node), "--slow-rate", args.slow_rate], []),
             ("slow compute", args.steps, [], [f"debug.delay_rank={args.slow_rank}", f"debug.delay_s={args.delay_s}"])]
    rows, healthy_margin = [], None
    for name, steps, lab_args, overrides in cases:
        out = os.path.join(work, name.replace(" ", "_"))
        info, wall = lab_run(out, steps, lab_args, overrides, args)
        s = info["telemetry"]["stragglers"]
        hosts = [h["hostname"] for h in info["hosts"]]
        steps_s = [json.loads(line)["step_time_s"] for line in open(os.path.join(out, "metrics.jsonl"))]
        rows.append((name, steps, " ".join(lab_args + overrides) or "-", s["verdict"], s["rank"], s["host"],
                     s["detected_at_step"], len(s["findings"]), sorted(steps_s)[len(steps_s) // 2], wall))
        if name == "healthy":
            healthy_margin = margin(out, hosts)
        print(rows[-1], flush=True)
    cmd = "python -m bench.stragglers " + " ".join(sys.argv[1:])
    lines = ["# Straggler detection in the fabric lab", "",
             f"Command: `sudo {cmd.strip()}` (root: the lab makes namespaces)  ",
             f"Machine: {platform.node()}, {os.cpu_count()} CPU cores shared with other jobs, {platform.platform()}  ",
             f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  ",
             f"Recipe: {args.recipe}, seq_len 128, 2 lab nodes x 1 rank, links {args.rate}; the detector's rule: "
             f"{stragglers.RULE}.", "",
             "| run | steps | fault | verdict | rank | host | detected at step | findings | median step (s) | wall (s) |",
             "| --- | ---: | --- | --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        cells = ["-" if v is None else str(v) for v in r[:8]] + [f"{r[8]:.3f}", f"{r[9]:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    m = healthy_margin
    worst = (f"at most {m['compute_flags_max_in_window']} of a full window's {m['compute_window_steps']} steps flagged "
             "one rank" if m["compute_window_steps"] else "no full window had a step flagging a rank")
    lines += ["", f"Healthy run's margin (its metrics replayed through the detector): {m['compute_steps_flagged']} of "
              f"{m['steps']} steps had one rank's compute >= {stragglers.COMPUTE_RATIO}x the other's; {worst} "
              f"(windows of >= {stragglers.COMPUTE_WINDOW} steps spanning >= {stragglers.COMPUTE_SPAN_S:g} s; a "
              f"finding needs {stragglers.COMPUTE_SHARE:.0%} of them); at most {m['network_flags_max_in_window']} "
              f"slow probes for one host in any window of {stragglers.LINK_WINDOW} probes (a finding needs "
              f"{stragglers.LINK_NEEDED}).", ""]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
