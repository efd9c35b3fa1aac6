"""bench/gpu/RESULTS.md from what bench/gpu/run.sh left in its output directory (no torch import); run.sh also
writes OUT/summary.md with it after every step, so a run cut short keeps a readable table.
  python bench/gpu/report.py OUT_DIR RESULTS.md [--layers N] [--steps N] [--warmup N]

Per run: tokens/s (samples/s for BERT and ResNet), MFU by our formula and by AutoModel's LoRA convention
(bench/gpu/flops.py names both), peak memory, the median step time and its spread (p90 - p10, % of median).
Harness rows take the steps after the warm-up ones whose `compile_s` is 0 (steady state)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path

from flops import automodel_lora_per_token, llama_params, mfu  # beside this script
from step_spread import spread  # beside this script


def _machine() -> str:
    gpu = "unknown GPU (nvidia-smi not found)"
    if shutil.which("nvidia-smi"):
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        gpu = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else gpu
    return f"{gpu}; {platform.node()}, {platform.python_version()}"


def _project() -> str:
    """The project's commit: git where the tree is a checkout, else FABRIC_HARNESS_COMMIT (a copied tree has
    no .git: the session that copies it can say which commit it was)."""
    here = Path(__file__).resolve().parents[2]
    try:
        q = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=30)
        if q.returncode == 0 and q.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=30).stdout.strip()
            return q.stdout.strip() + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    given = os.environ.get("FABRIC_HARNESS_COMMIT", "").strip()
    return given or "unknown (no git checkout here and FABRIC_HARNESS_COMMIT not set)"


# run.sh's steps in the order it runs them: rows kept from an earlier call (--only) sort into place
ORDER = ("install", "data", "harness_telemetry_on", "harness_telemetry_off", "plain_lora", "plain_lora_compile",
         "harness_compile", "plain_lora_eager", "bert_harness", "bert_plain", "resnet_harness", "resnet_plain",
         "profile", "pytest", "report")


def _steps(out: Path) -> list[list[str]]:
    path = out / "steps.tsv"
    rows = [line.split("\t") for line in path.read_text().splitlines() if line] if path.exists() else []
    return sorted(rows, key=lambda r: ORDER.index(r[0]) if r[0] in ORDER else len(ORDER))


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


def _harness(run_dir: Path, warmup: int) -> dict | None:
    metrics = run_dir / "metrics.jsonl"
    if not metrics.exists():
        return None
    rows = []
    for line in metrics.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a run cut short may leave a partial last line
            pass
    timed = [r for r in rows if r["step"] > warmup and not r.get("compile_s")] or rows
    if not timed:
        return None
    info = json.loads((run_dir / "run.json").read_text())
    final = next(iter(sorted((run_dir / "ranks").glob("*.final.json"))), None)
    peak = json.loads(final.read_text()).get("peak_memory_bytes") if final else None
    out = {"status": info.get("status"), "steps": len(rows), "timed": len(timed),
           "median_step_s": statistics.median(r["step_time_s"] for r in timed),
           "spread_pct": spread([r["step_time_s"] for r in timed])["spread_pct"],
           "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed) if timed[0].get("tokens_per_s") else None,
           "samples_per_s": statistics.median(r["samples_per_s"] for r in timed),
           "mfu": statistics.median(r["mfu"] for r in timed) if timed[0].get("mfu") is not None else None,
           "last_loss": rows[-1]["loss"], "peak_memory_GiB": peak / 2**30 if peak else None,
           "compile_s": (info.get("compile") or {}).get("compile_s"),
           "kernels": ((info.get("model") or {}).get("kernels") or {}).get("used")}
    recipe = info.get("recipe") or {}
    cfg = (recipe.get("model") or {}).get("config")
    peak_tflops = (info.get("throughput") or {}).get("peak_tflops_per_device")
    if recipe.get("workload") == "llm_lora" and isinstance(cfg, dict) and out["tokens_per_s"]:
        out["mfu_automodel"] = mfu(out["tokens_per_s"], automodel_lora_per_token(
            llama_params(cfg, recipe["lora"]["r"], recipe["lora"]["target_modules"])), peak_tflops)
    return out


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("results")
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    out = Path(args.out)
    lines = ["# GPU benchmark (bash bench/gpu/run.sh)", "",
             f"- command: `bash bench/gpu/run.sh --layers {args.layers} --steps {args.steps}`",
             f"- date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
             f"- machine: {_machine()}", f"- project: {_project()}", ""]
    lines += ["## Steps", "", "| step | outcome | seconds | note |", "|---|---|---|---|"]
    lines += [f"| {s[0]} | {s[1]} | {s[2]} | {s[3] if len(s) > 3 else ''} |" for s in _steps(out)]
    tests = _pytest(out)
    if tests:
        lines += ["", "## pytest -m gpu tests/gpu", "", "| test | outcome | detail |", "|---|---|---|"]
        lines += [f"| {n} | {o} | {d} |" for n, o, d in tests]
    lines += ["", f"## Llama-3-8B-shaped LoRA, {args.layers} of 32 layers, seq 2048, bf16, one GPU", "",
              "Random init; LoRA r=16 on q/k/v/o/gate/up/down; the same random token rows for every run. "
              f"Median over {args.steps} steps after {args.warmup} warm-up steps (harness: and no compiling step). "
              "MFU ours: 4N + 2N_trainable + 12 L d T per token (trainer/throughput.py); MFU AutoModel: its LoRA "
              "convention, 6N x (2 + N_lora/N_frozen)/3 per token (bench/gpu/flops.py). Spread: (p90 - p10) / "
              "median step time.", "",
              "| run | micro-batch | tokens/s | MFU ours | MFU AutoModel | peak GiB | s/step | spread | last loss |",
              "|---|---|---|---|---|---|---|---|---|"]
    runs = {"harness, liger, telemetry on": ("h", "harness_telemetry_on", 4),
            "harness, liger, telemetry off": ("h", "harness_telemetry_off", 4),
            "harness, liger + compiled blocks, telemetry on": ("h", "harness_compile", 4),
            "plain loop, liger": ("p", "plain_lora", 4),
            "plain loop, liger + compiled blocks": ("p", "plain_lora_compile", 4),
            "plain loop, eager": ("p", "plain_lora_eager", 2)}
    got = {}
    for name, (kind, key, mbs) in runs.items():
        r = _harness(out / key, args.warmup) if kind == "h" else _json(out / f"{key}.json")
        got[key] = r
        if r is None:
            lines.append(f"| {name} | {mbs} | not measured | | | | | | |")
            continue
        lines.append(f"| {name} | {r.get('micro_batch', mbs)} | {_fmt(r['tokens_per_s'], ',.0f')} | "
                     f"{_fmt(r.get('mfu'), '.3f')} | {_fmt(r.get('mfu_automodel'), '.3f')} | "
                     f"{_fmt(r.get('peak_memory_GiB'), '.1f')} | {_fmt(r['median_step_s'], '.3f')} | "
                     f"{_fmt(r.get('spread_pct'), '.1f')}% | {_fmt(r.get('last_loss'), '.3f')} |")
    ratio = lambda a, b: (got[a]["tokens_per_s"] / got[b]["tokens_per_s"]  # noqa: E731
                          if got.get(a) and got.get(b) and got[a]["tokens_per_s"] and got[b]["tokens_per_s"] else None)
    notes = [("telemetry on / off", ratio("harness_telemetry_on", "harness_telemetry_off")),
             ("harness / plain loop (liger)", ratio("harness_telemetry_on", "plain_lora")),
             ("harness / plain loop (liger + compiled blocks)", ratio("harness_compile", "plain_lora_compile"))]
    lines.append("")
    lines += [f"- {what}: {v:.3f} (tokens/s)" for what, v in notes if v is not None]
    lines += ["", "## BERT-Large and ResNet-50, random inputs of the real shapes, bf16 autocast, one GPU", "",
              "| run | micro-batch | samples/s | peak GiB | s/step | spread |", "|---|---|---|---|---|---|"]
    for name, kind, key, mbs in (("BERT-Large, harness (AdamW)", "h", "bert_harness", 32),
                                 ("BERT-Large, plain loop (AdamW)", "p", "bert_plain", 32),
                                 ("ResNet-50, harness (SGD, channels_last)", "h", "resnet_harness", 256),
                                 ("ResNet-50, plain loop (SGD, channels_last, compiled)", "p", "resnet_plain", 256)):
        r = _harness(out / key, args.warmup) if kind == "h" else _json(out / f"{key}.json")
        if r is None:
            lines.append(f"| {name} | {mbs} | not measured | | | |")
            continue
        lines.append(f"| {name} | {mbs} | {_fmt(r.get('samples_per_s'), ',.1f')} | "
                     f"{_fmt(r.get('peak_memory_GiB'), '.1f')} | {_fmt(r['median_step_s'], '.3f')} | "
                     f"{_fmt(r.get('spread_pct'), '.1f')}% |")
    Path(args.results).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
