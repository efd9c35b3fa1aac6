"""The collective sweep's recipe checks (no torch: the dry run uses them)."""
from __future__ import annotations

from ..checks import at_least
from .plan import DEFAULT_FACTOR, MAX_SIZES, SWEEP_DTYPES, SWEEP_OPS, SweepConfig, count_sizes, parse_size, sizes, step_of


# short spellings of the sweep's dtypes: nccl-tests' -d float, half, double; torch's and NeMo's bf16, fp16
DTYPE_SPELLINGS = {"float": "float32", "fp32": "float32", "f32": "float32", "half": "float16", "fp16": "float16",
                   "f16": "float16", "double": "float64", "fp64": "float64", "f64": "float64", "bf16": "bfloat16",
                   "int": "int32", "char": "int8", "byte": "uint8"}


def _op_meant(op: object) -> str | None:
    """The sweep op an nccl-tests spelling names: alltoall, allreduce, all_reduce_perf, All-Reduce."""
    key = str(op).lower().removesuffix("_perf").replace("_", "").replace("-", "")
    return next((name for name in SWEEP_OPS if name.replace("_", "") == key), None)


def _ops_problem(ops: list) -> str | None:
    bad = [op for op in ops if op not in SWEEP_OPS]
    if bad or not ops:
        hints = [f"'{meant}' for {op!r}" for op in bad if (meant := _op_meant(op))]
        hint = f"did you mean {', '.join(hints)}? " if hints else ""
        return f"sweep.ops: got {ops}; {hint}allowed: {', '.join(SWEEP_OPS)}"
    if twice := sorted({op for op in ops if ops.count(op) > 1}):  # its second table replaced the first
        return f"sweep.ops: {', '.join(twice)} given twice; allowed: each op once (sweep.repeats repeats them)"
    return None


def check_sweep(sw: SweepConfig) -> list[str]:
    p: list[str] = []
    if problem := _ops_problem(sw.ops):
        p.append(problem)
    if sw.dtype not in SWEEP_DTYPES:
        meant = DTYPE_SPELLINGS.get(str(sw.dtype).lower())
        hint = f"did you mean {meant!r}? " if meant else ""
        p.append(f"sweep.dtype: got {sw.dtype!r}; {hint}allowed: {', '.join(SWEEP_DTYPES)}")
    lo, hi = parse_size(sw.min_bytes, "sweep.min_bytes", p), parse_size(sw.max_bytes, "sweep.max_bytes", p)
    if lo and hi and lo > hi:
        p.append(f"sweep.max_bytes: {sw.max_bytes!r} is below sweep.min_bytes {sw.min_bytes!r}; allowed: "
                 "max_bytes >= min_bytes (equal for one size)")
    # with step_bytes the factor is unused, and nccl-tests' own spelling of a linear sweep is -f 1 -i STEP
    p += at_least("sweep", sw, ("factor",), 2 if sw.step_bytes is None else 1)
    if sw.step_bytes is not None and isinstance(sw.factor, int) and sw.factor > DEFAULT_FACTOR:
        # nccl-tests' -f 4 -i 1M multiplies by 4 (a factor above 1 wins); the sweep adds step_bytes and the
        # factor went unused without a word. Only the default factor cannot be told from one the user gave.
        p.append(f"sweep.factor: got {sw.factor} beside sweep.step_bytes {sw.step_bytes!r}: the sweep adds "
                 "step_bytes each step and would not use the factor (nccl-tests multiplies when both -f and -i are "
                 "given); allowed: sweep.step_bytes null to multiply by the factor, or sweep.factor 1 with step_bytes")
    p += at_least("sweep", sw, ("iters", "latency_iters", "repeats"), 1)
    p += at_least("sweep", sw, ("warmup",), 0)
    if sw.root < 0:
        p.append(f"sweep.root: got {sw.root}; expected a rank >= 0")
    if sw.device_memory is not None:
        parse_size(sw.device_memory, "sweep.device_memory", p, limit=1 << 40)
    p += at_least("sweep", sw, ("per_iter_skip",), 0)
    if sw.per_iter_skip and sw.per_iter_skip >= sw.iters:
        p.append(f"sweep.per_iter_skip: got {sw.per_iter_skip}; expected fewer than sweep.iters ({sw.iters})")
    if not 0 <= sw.min_seconds_per_size <= 3600:
        p.append(f"sweep.min_seconds_per_size: got {sw.min_seconds_per_size}; expected seconds in [0, 3600]")
    step = step_of(sw, p)
    stepping = step if sw.step_bytes is not None else sw.factor >= 2  # a bad step or factor: no sizes to check against
    planned = count_sizes(lo, hi, sw.factor, step) if lo and hi and stepping else None
    if planned is not None and planned > MAX_SIZES:  # only a linear sweep gets there
        p.append(f"sweep.step_bytes: {sw.min_bytes!r} to {sw.max_bytes!r} in steps of {sw.step_bytes!r} is {planned} "
                 f"sizes per collective; allowed: at most {MAX_SIZES} (a larger step_bytes, or null to multiply by "
                 "sweep.factor)")
    if step and lo and hi and lo < hi < lo + step:  # nccl-tests -i larger than -e minus -b: one size, min_bytes
        p.append(f"sweep.step_bytes: {sw.step_bytes!r} is more than the range from sweep.min_bytes {sw.min_bytes!r} "
                 f"to sweep.max_bytes {sw.max_bytes!r}: only min_bytes would be measured; allowed: a step up to "
                 f"max_bytes - min_bytes ({hi - lo} bytes), or min_bytes = max_bytes for one size")
    if sw.power_sizes:
        swept = set(sizes(lo, hi, sw.factor, step)) if planned is not None and planned <= MAX_SIZES else set()
        rule = f"+ {sw.step_bytes} each step" if step else f"x {sw.factor}^k"
        for i, v in enumerate(sw.power_sizes):
            n = parse_size(v, f"sweep.power_sizes[{i}]", p)
            if n and swept and n not in swept:
                p.append(f"sweep.power_sizes[{i}]: {v!r} is not one of the sweep's sizes ({sw.min_bytes} {rule} up "
                         f"to {sw.max_bytes}); allowed: a size the sweep measures")
        if sw.min_seconds_per_size <= 0:
            p.append("sweep.power_sizes: set, but sweep.min_seconds_per_size is 0: nothing is held long enough for "
                     "a power reading; allowed: sweep.min_seconds_per_size > 0 (e.g. 5)")
    if sw.straggler_pct <= 0:
        p.append(f"sweep.straggler_pct: got {sw.straggler_pct}; expected a percentage > 0")
    return p
