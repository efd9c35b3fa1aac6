"""Builders for recorded run directories used by the report and compare tests."""
from __future__ import annotations

import json


def write_run(path, *, name="recorded", lr=0.01, step_time=1.0, comm_time=0.25, energy=True, rate_bps=None,
              losses=None, transport="tcp", expectation=None, sweep=None, extra_comm=None, fabric_extra=None,
              info_extra=None, train_extra=None, times=False, exposed_time=0.1, recipe_extra=None, step_times=None):
    path.mkdir(parents=True)
    fabric = {"backend": "nccl", "transport": transport,
              "expectation": expectation or {"expected": "any", "detected": transport, "match": None},
              **(fabric_extra or {})}
    if rate_bps:
        fabric["lab"] = {"rate": f"{int(rate_bps / 1e6)}mbit", "rate_bps": rate_bps, "burst_bytes": 0}
    recipe = {"name": name, "workload": "collectives" if sweep else "llm_lora", "output_dir": str(path),
              "train": {"lr": lr, "global_batch_size": 8, **(train_extra or {})}, "max_steps": 6, **(recipe_extra or {})}
    (path / "run.json").write_text(json.dumps({
        "name": name, "status": "completed", "recipe": recipe,
        "layout": {"world_size": 2, "dp": 2, "tp": 1, "pp": 1, "data_parallel": "ddp", "global_batch_size": 8},
        "hosts": [{"hostname": "a"}, {"hostname": "b"}], "fabric": fabric,
        "telemetry": {"counters": {"verdict": "clean", "reason": "no drops"}}, **(info_extra or {})}))
    if sweep:
        (path / "collectives.json").write_text(json.dumps(sweep))
    lines = []
    losses = losses or [3.0 - 0.1 * s for s in range(1, 7)]
    clock = 1_700_000_000.0  # wall clock at the start of step 1
    for step in range(1, 7):
        own = step_times[step - 1] if step_times else None  # one time per step, where the test gives them
        rec = {"step": step, "loss": losses[step - 1],
               "step_time_s": own if own is not None else 2 * step_time if step == 1 else step_time,
               "tokens_per_s": 1000.0, "comm": {"all_reduce": {"count": 1, "bytes": 1_000_000, "time_s": comm_time,
                                                               "untimed": 0, "busbw_GBps": 0.004}},
               "comm_time_s": comm_time, "exposed_comm_s": exposed_time,
               "ranks": {"step_time_s": {"min": 0.9, "median": 1.0, "max": 1.1},
                         "comm_time_s_by_op": {"all_reduce": {"min": comm_time}}},
               "job_gpu_energy_j": 500.0 if energy else None, "job_gpu_power_w": 480.0 if energy else None,
               "job_net_tx_bytes": 2e6}
        if times:  # wall clock at the end of the step, as the loop writes it
            clock += rec["step_time_s"]
            rec["time"] = clock
        if extra_comm:  # e.g. collectives counted without a time
            rec["comm"].update(extra_comm)
        if not energy:
            rec["gpu_energy_reason"] = "NVML not available"
        if step == 4:
            rec["profiled"] = True
            rec["exposed"] = {"exposed_share": 0.2, "comm_share": 0.25, "window_s": 1.0,
                              "by_op": {"all_reduce": {"exposed_share": 0.2}}}
        lines.append(json.dumps(rec))
    (path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 7, "loss"')  # killed mid-line
    return path


def sweep_result(scale=1.0):
    def rows(op):
        out = []
        for size in (8, 1024, 1048576):
            t = (20 + size / 1e3) * scale
            block = {"time_us": t, "algbw_GBps": size / t / 1e3, "busbw_GBps": size / t / 1e3, "wrong": 0}
            out.append({"size": size, "count": size // 4, "in_place": block,
                        "out_of_place": None if op == "all_reduce" else block})
        return out
    # repeats: the sweep's own setting (each size timed that often, the median kept), not runs to merge
    return {"world_size": 2, "repeats": 3, "ops": {op: {"rows": rows(op), "avg_busbw_GBps": 1.0 / scale, "wrong": 0}
                                     for op in ("all_reduce", "sendrecv")},
            "latency_us": {"all_reduce_4B_us": 40.0 * scale, "sendrecv_48B_us": 41.0 * scale}}
