"""One step's scalars under the names TensorBoard and W&B show (every exporter uses the same)."""
from __future__ import annotations

from telemetry.rundir import StepKey


def step_scalars(record: dict) -> dict[str, float]:
    """One step's scalars under the names TensorBoard and W&B show; unknown values are left out (neither
    tool has a null), never written as 0."""
    out = {}

    def put(name, value):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            out[name] = float(value)

    train = (StepKey.LOSS, StepKey.LR, StepKey.GRAD_NORM)
    perf = (StepKey.STEP_TIME_S, StepKey.SAMPLES_PER_S, StepKey.TOKENS_PER_S, StepKey.MFU, StepKey.TFLOPS_PER_DEVICE)
    for key in (*train, *perf, StepKey.COMM_TIME_S, StepKey.COMM_BYTES, StepKey.EXPOSED_COMM_S):
        put(f"train/{key}" if key in train else f"perf/{key}" if key in perf else f"comm/{key}", record.get(key))
    for op, s in sorted((record.get(StepKey.COMM) or {}).items()):
        put(f"comm/{op}/time_s", s.get("time_s"))
        put(f"comm/{op}/bytes", s.get("bytes"))
        put(f"comm/{op}/count", s.get("count"))
        put(f"comm/{op}/busbw_GBps", s.get("busbw_GBps"))
    groups = record.get(StepKey.COMM_GROUPS) or {}
    for name, g in sorted(groups.items()):  # per process group (tp, dp, ...), busbw at the group's size
        for key in ("time_s", "bytes", "count", "busbw_GBps"):
            put(f"comm_group/{name}/{key}", g.get(key))
    inter = [g for g in groups.values() if g.get("scope") == "inter"]
    if groups:  # the fabric's share: what the inter-node groups moved
        put("comm/fabric_bytes", sum(g.get("bytes") or 0 for g in inter))
        times = [g.get("time_s") for g in inter]
        put("comm/fabric_time_s", sum(times) if None not in times else None)
    put("comm/exposed_share", (record.get(StepKey.EXPOSED) or {}).get("exposed_share"))
    put("comm/exposed_s", (record.get(StepKey.EXPOSED) or {}).get("exposed_s"))
    # sums over the job's GPUs / hosts
    for key in (StepKey.JOB_GPU_ENERGY_J, StepKey.JOB_GPU_POWER_W, StepKey.JOB_CPU_ENERGY_J):
        put(f"energy/{key}", record.get(key))
    spread = (record.get(StepKey.RANKS) or {}).get(StepKey.STEP_TIME_S) or {}
    put("ranks/step_time_s_max", spread.get("max"))
    put("ranks/step_time_s_min", spread.get("min"))
    for key in (StepKey.EVAL_LOSS, StepKey.EVAL_ACCURACY):
        put(f"eval/{key[5:]}", record.get(key))
    return out
