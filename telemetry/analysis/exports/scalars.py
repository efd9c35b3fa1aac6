"""One step's scalars under the names TensorBoard and W&B show (every exporter uses the same)."""
from __future__ import annotations


def step_scalars(record: dict) -> dict[str, float]:
    """One step's scalars under the names TensorBoard and W&B show; unknown values are left out (neither
    tool has a null), never written as 0."""
    out = {}

    def put(name, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            out[name] = float(value)

    for key in ("loss", "lr", "grad_norm", "step_time_s", "samples_per_s", "tokens_per_s", "mfu",
                "tflops_per_device", "comm_time_s", "comm_bytes", "exposed_comm_s"):
        put(f"train/{key}" if key in ("loss", "lr", "grad_norm") else f"perf/{key}" if key in (
            "step_time_s", "samples_per_s", "tokens_per_s", "mfu", "tflops_per_device") else f"comm/{key}",
            record.get(key))
    for op, s in sorted((record.get("comm") or {}).items()):
        put(f"comm/{op}/time_s", s.get("time_s"))
        put(f"comm/{op}/bytes", s.get("bytes"))
        put(f"comm/{op}/count", s.get("count"))
        put(f"comm/{op}/busbw_GBps", s.get("busbw_GBps"))
    groups = record.get("comm_groups") or {}
    for name, g in sorted(groups.items()):  # per process group (tp, dp, ...), busbw at the group's size
        for key in ("time_s", "bytes", "count", "busbw_GBps"):
            put(f"comm_group/{name}/{key}", g.get(key))
    inter = [g for g in groups.values() if g.get("scope") == "inter"]
    if groups:  # the fabric's share: what the inter-node groups moved
        put("comm/fabric_bytes", sum(g.get("bytes") or 0 for g in inter))
        times = [g.get("time_s") for g in inter]
        put("comm/fabric_time_s", sum(times) if None not in times else None)
    put("comm/exposed_share", (record.get("exposed") or {}).get("exposed_share"))
    put("comm/exposed_s", (record.get("exposed") or {}).get("exposed_s"))
    for key in ("job_gpu_energy_j", "job_gpu_power_w", "job_cpu_energy_j"):  # sums over the job's GPUs / hosts
        put(f"energy/{key}", record.get(key))
    spread = (record.get("ranks") or {}).get("step_time_s") or {}
    put("ranks/step_time_s_max", spread.get("max"))
    put("ranks/step_time_s_min", spread.get("min"))
    for key in ("eval_loss", "eval_accuracy"):
        put(f"eval/{key[5:]}", record.get(key))
    return out
