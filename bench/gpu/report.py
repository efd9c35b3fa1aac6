"""bench/gpu/RESULTS.md from what bench/gpu/run.sh left in its output directory (no torch import):
  python bench/gpu/report.py OUT_DIR RESULTS.md [--layers N] [--steps N]"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

WARMUP = 5  # harness steps left out of the median (first-step allocation and kernel selection)


def _machine() -> str:
    gpu = "unknown GPU (nvidia-smi not found)"
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        gpu = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else gpu
    return f"{gpu}; {platform.node()}, {platform.python_version()}"


def _steps(out: Path) -> list[list[str]]:
    path = out / "steps.tsv"
    return [line.split("\t") for line in path.read_text().splitlines() if line] if path.exists() else []


def _pytest(out: Path) -> list[tuple[str, str, str]]:
    path = out / "pytest.xml"
    if not path.exists():
        return []
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[kind]
                detail = " ".join((node.get("message") or "").split())[:160]
        rows.append((name, outcome, detail))
    return rows


def _harness(run_dir: Path) -> dict | None:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return None
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r["step"] > WARMUP] or rows
    info = json.loads((run_dir / "run.json").read_text())
    final = next(iter(sorted((run_dir / "ranks").glob("*.final.json"))), None)
    peak = json.loads(final.read_text()).get("peak_memory_bytes") if final else None
    return {"status": info.get("status"), "steps": len(rows), "timed": len(timed),
            "median_step_s": statistics.median(r["step_time_s"] for r in timed),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
            "last_loss": rows[-1]["loss"] if rows else None,
            "peak_memory_GiB": peak / 2**30 if peak else None, "torch": (info.get("software") or {}).get("torch")}


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("results")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    out = Path(args.out)
    lines = ["# GPU checks (bash bench/gpu/run.sh)", "",
             f"- command: `bash bench/gpu/run.sh --layers {args.layers} --steps {args.steps}`",
             f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
             f"- machine: {_machine()}", ""]
    lines += ["## Steps", "", "| step | outcome | seconds | note |", "|---|---|---|---|"]
    lines += [f"| {s[0]} | {s[1]} | {s[2]} | {s[3] if len(s) > 3 else ''} |" for s in _steps(out)]
    tests = _pytest(out)
    if tests:
        lines += ["", "## pytest -m gpu tests/gpu", "", "| test | outcome | detail |", "|---|---|---|"]
        lines += [f"| {n} | {o} | {d} |" for n, o, d in tests]
    lines += ["", f"## Llama-3-8B-shaped LoRA, {args.layers} of 32 layers, seq 2048, micro-batch 1, bf16, "
                  f"one GPU", "",
              "Random init; LoRA r=16 on q/k/v/o/gate/up/down; the same random token rows for every run. "
              f"Median over the steps after the first {WARMUP}.", "",
              "| run | tokens/s | s/step | peak memory GiB | last loss | steps |", "|---|---|---|---|---|---|"]
    results = {"harness, telemetry on": _harness(out / "harness_telemetry_on"),
               "harness, telemetry off": _harness(out / "harness_telemetry_off")}
    plain_path = out / "plain_lora.json"
    results["plain transformers + peft"] = json.loads(plain_path.read_text()) if plain_path.exists() else None
    for name, r in results.items():
        if r is None:
            lines.append(f"| {name} | not measured | | | | |")
            continue
        lines.append(f"| {name} | {_fmt(r['tokens_per_s'], ',.0f')} | {_fmt(r['median_step_s'], '.3f')} | "
                     f"{_fmt(r.get('peak_memory_GiB'), '.1f')} | {_fmt(r.get('last_loss'), '.3f')} | "
                     f"{r.get('steps', r.get('steps_timed'))} |")
    on, off, plain = (results[k] for k in results)
    if on and off:
        lines.append(f"\nTelemetry on vs off: {on['tokens_per_s'] / off['tokens_per_s'] - 1:+.1%} tokens/s.")
    if off and plain:
        lines.append(f"Harness (telemetry off) vs plain loop: {off['tokens_per_s'] / plain['tokens_per_s'] - 1:+.1%} "
                     "tokens/s.")
    Path(args.results).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
