"""Run directories as a finished run leaves them (run.json and six steps in metrics.jsonl, the fields the
reports read), for the bad-input table to damage one way each."""
from __future__ import annotations

import json
from pathlib import Path


def write_run(path: Path, name: str = "recorded", workload: str = "llm_lora", times: bool = False) -> Path:
    """A completed two-rank run of `workload`; `times`: each step's wall clock (`time`), as the loop writes it."""
    path.mkdir(parents=True)
    recipe = {"name": name, "workload": workload, "output_dir": str(path), "max_steps": 6,
              "train": {"lr": 0.01, "global_batch_size": 8}}
    (path / "run.json").write_text(json.dumps({
        "name": name, "status": "completed", "recipe": recipe,
        "layout": {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "data_parallel": "ddp", "global_batch_size": 8},
        "hosts": [{"hostname": "a"}, {"hostname": "b"}],
        "fabric": {"backend": "nccl", "transport": "tcp",
                   "expectation": {"expected": "any", "detected": "tcp", "match": None}},
        "telemetry": {"counters": {"verdict": "clean", "reason": "no drops"}}}))
    lines, clock = [], 1_700_000_000.0
    for step in range(1, 7):
        rec = {"step": step, "loss": 3.0 - 0.1 * step, "step_time_s": 2.0 if step == 1 else 1.0,
               "tokens_per_s": 1000.0, "comm": {"all_reduce": {"count": 1, "bytes": 1_000_000, "time_s": 0.25,
                                                               "untimed": 0, "busbw_GBps": 0.004}},
               "comm_time_s": 0.25, "exposed_comm_s": 0.1,
               "ranks": {"step_time_s": {"min": 0.9, "median": 1.0, "max": 1.1}}}
        if times:
            clock += rec["step_time_s"]
            rec["time"] = clock
        lines.append(json.dumps(rec))
    (path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    return path
