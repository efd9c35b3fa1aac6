"""What a collective sweep allocates, per rank, at each size: without torch, so that `--dry-run` can
check a 16 GB sweep on a laptop before a 64-GPU job waits in a queue for it.

Sizes follow nccl-tests (its `setupArgs`/`getCollByteCount`): S bytes is S / element size elements in
all; reduce_scatter, all_gather, alltoall, gather and scatter give each rank count = S / size / ranks (rounded down, and 0
below ranks x element size: nccl-tests then runs and prints a zero-element collective, size 0), the others
count = S / size. Every requested size keeps its own row; the JSON keeps the requested size beside it.

Per rank the sweep holds the collective's send and receive buffers and nothing that grows with the rank
count: operands are filled from a formula of (rank, index), results checked against the formula in
chunks of CHECK_CHUNK elements, and one size's buffers are freed before the next size's are made.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Union

from telemetry.formulas import count_sweep_sizes, sweep_sizes

SWEEP_WORKLOAD = "collectives"  # the recipe's `workload` value that makes the job a sweep (Recipe.job)
SWEEP_BYTES_MAX = 1 << 36  # 64 GiB: more than any accelerator's memory per buffer

ELEMENT_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "int8": 1,
                "uint8": 1}
# Size S counts the whole collective's data: for these, each rank holds S/n (nccl-tests' convention).
PER_RANK_SPLIT = {"reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"}
CHECK_CHUNK = 1 << 19  # elements filled or checked at once
# temporaries per element of a chunk while checking: int64 indices and the formula's intermediates, the
# expected value in the dtype and as float64, the result as float64, differences, tolerances, a mask
CHECK_BYTES_PER_ELEMENT = 64
# CUDA context and NCCL's own buffers, not counted by the sweep: an estimate (NCCL's per-channel buffers are
# tens to hundreds of MiB at scale, the context a few hundred MiB)
DEVICE_RESERVE_BYTES = 1 << 30
ASSUMED_DEVICE_BYTES = 80 << 30  # a dry run with no device and no sweep.device_memory: an 80 GB H100/A100


def counts(op: str, size: int, world: int, elsize: int) -> tuple[int, int]:
    """(count per rank, total elements) for requested size S, as nccl-tests computes them."""
    if op in PER_RANK_SPLIT:
        per = size // elsize // world
        return per, per * world
    per = size // elsize
    return per, per


def buffer_bytes(op: str, size: int, world: int, elsize: int, in_place: str = "both") -> int:
    """The most bytes one rank holds at once for op at requested size S (forms run one after the other)."""
    per, total = counts(op, size, world, elsize)
    forms = {"both": ("out_of_place", "in_place"), "out_of_place": ("out_of_place",),
             "in_place": ("in_place",)}[in_place]
    need = []
    for form in forms:
        if op in ("all_reduce", "broadcast", "reduce"):
            need.append(total)  # one buffer (torch has only the in-place form)
        elif op in ("reduce_scatter", "all_gather", "gather", "scatter"):
            need.append(total + (per if form == "out_of_place" else 0))
        else:  # all_to_all, sendrecv, the pairs, p2p_matrix: separate send and receive buffers
            need.append(2 * total)
    check = min(total, CHECK_CHUNK) * CHECK_BYTES_PER_ELEMENT
    return max(need) * elsize + check


def human(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"


def largest_need(ops: list[str], max_bytes: int, world: int, dtype: str, in_place: str) -> tuple[int, str]:
    """(bytes per rank, op) of the hungriest op at the largest size, among the ops that run at this world size
    (a world of one skips sendrecv, and its p2p matrix has no pair to measure: the need never names them there)."""
    elsize = ELEMENT_SIZE[dtype]
    runs = [op for op in ops if not (op in ("sendrecv", "p2p_matrix") and world < 2)] or list(ops)
    return max((buffer_bytes(op, max_bytes, world, elsize, in_place), op) for op in runs)


def memory_problem(ops: list[str], max_bytes: int, world: int, dtype: str, in_place: str, device_bytes: int,
                   what: str, reserve: int = DEVICE_RESERVE_BYTES) -> str | None:
    """One line when the largest size cannot fit: the size, the per-rank need and the memory."""
    need, op = largest_need(ops, max_bytes, world, dtype, in_place)
    if need + reserve <= device_bytes:
        return None
    return (f"sweep.max_bytes: {max_bytes} bytes ({human(max_bytes)}) needs {need} bytes ({human(need)}) per rank "
            f"for {op} at {world} ranks, plus {human(reserve)} kept for the CUDA context and NCCL, but {what} has "
            f"{device_bytes} bytes ({human(device_bytes)}); allowed: a sweep.max_bytes whose need fits")


def dry_run_line(ops: list[str], max_bytes: int, world: int, dtype: str, in_place: str, device_bytes: int,
                 what: str) -> str:
    need, op = largest_need(ops, max_bytes, world, dtype, in_place)
    held = ("one buffer, in place" if op in ("all_reduce", "broadcast", "reduce")
            else "its share and the whole" if op in ("reduce_scatter", "all_gather", "gather", "scatter")
            else "send and receive buffers")
    return (f"# sweep memory: the largest size, {human(max_bytes)}, needs {human(need)} per rank ({op}, {held}; "
            f"the same at any rank count) + {human(DEVICE_RESERVE_BYTES)} reserve; "
            f"checked against {what}, {human(device_bytes)}")

def held_here(cfg, size: int) -> bool:
    """Whether a size is held for sweep.min_seconds_per_size: every size, or those of sweep.power_sizes."""
    if not getattr(cfg, "power_sizes", None):
        return True
    return size in {parse_size(v, "sweep.power_sizes", []) for v in cfg.power_sizes}


MAX_SIZES = 4096  # per collective: a linear sweep of 1M steps up to 4G; more is a typo (-i 8 up to 1G: 134M sizes)


def count_sizes(lo: int, hi: int, factor: int, step: int | None = None) -> int:
    """How many sizes `sizes` gives (telemetry.formulas owns the rule: `telemetry watch` counts them too); 0 for
    an empty range."""
    return count_sweep_sizes(lo, hi, factor, step) or 0


sizes = sweep_sizes  # the sizes nccl-tests measures: lo, then x factor (-f), or + step bytes (-i), up to hi


SWEEP_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv", "broadcast", "reduce", "gather",
             "scatter", "p2p_matrix")
# what fabric evaluations run; reduce, gather and scatter (nccl-tests' reduce_perf, gather_perf, scatter_perf)
# and p2p_matrix (GPU-only) are asked for by name
SWEEP_DEFAULT_OPS = SWEEP_OPS[:6]
DEFAULT_FACTOR = 2
SWEEP_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8")


@dataclass
class SweepConfig:
    """An nccl-tests-style collective sweep (workload: collectives)."""
    ops: list[str] = field(default_factory=lambda: list(SWEEP_DEFAULT_OPS))
    min_bytes: Union[int, str] = 8  # sizes accept K/M/G suffixes (powers of 1024), like nccl-tests -b/-e
    max_bytes: Union[int, str] = "64M"
    factor: int = DEFAULT_FACTOR  # -f: multiply the size by this each step
    # -i: add this many bytes each step instead (nccl-tests' linear sweep, e.g. 1M from 1M to 256M); null: factor
    step_bytes: Union[int, str, None] = None
    warmup: int = 5  # -w
    iters: int = 20  # -n
    # timed runs of `iters` per size (no nccl-tests flag): the row shows their median, the JSON their spread;
    # on shared or shaped links one timing can be off by 10-15%, the median of a few is stable
    repeats: int = 1
    # which repeat a row shows: the median, or the best (shortest time: what the link sustains when nothing
    # else on the host gets in the way; slower repeats are interference, not the link)
    repeat_stat: Literal["median", "best"] = "median"
    dtype: str = "float32"  # -d
    redop: Literal["sum", "prod", "min", "max", "avg"] = "sum"  # -o
    root: int = 0  # -r, for broadcast, reduce, gather and scatter
    in_place: Literal["both", "out_of_place", "in_place"] = "both"
    check: bool = True  # -c: verify every result
    time_reduction: Literal["avg", "min", "max", "rank0"] = "avg"  # -a
    latency_table: bool = True  # 4 B all-reduce and 48 B send-receive, as fabric evaluations report
    latency_iters: int = 200
    pairs: bool = True  # send/recv between a pair inside a node and a pair across nodes
    # memory per device checked against the largest size before the sweep starts (bytes, or 80G); null: the
    # CUDA device's own total (CPU runs: host memory / local ranks; a dry run assumes an 80 GB GPU)
    device_memory: Union[int, str, None] = None
    # nccl-tests -I 1: time each iteration on its own (CUDA events between iterations on GPUs, a clock read
    # after each completion on CPU) for p50/p95/p99 and per-rank times in collectives.nccl-tests.json
    per_iter_timing: bool = False
    per_iter_skip: int = 0  # -K: leading iterations left out of the per-iteration statistics
    # hold each size this long (more iterations, untimed) so that the power sampler reads it; 0 = no hold
    min_seconds_per_size: float = 0.0
    # only these sizes are held (e.g. [8K, 1M, 128M]: the first evaluation's power table); empty: every size
    power_sizes: list[Union[int, str]] = field(default_factory=list)
    # a size's slowest rank is named when its mean iteration time exceeds the fastest rank's by this much
    straggler_pct: float = 10.0


_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGkmg]?)[Bb]?$")  # 4096, 4K, 64M, 1G, 1.5G, 64MB


def _size_hint(value: object) -> str:
    """'; did you mean ...?' for the near misses: 16GiB or 16 G (16G), 1e9 (1000000000), -1M (at least 1 byte)."""
    text = str(value).strip()
    if text.startswith("-"):
        return "; sizes are at least 1 byte"
    near = re.sub(r"(?<=[KMGkmg])[iI]?[Bb]?$", "", re.sub(r"\s+", "", text))
    if near != text and _SIZE.match(near):
        binary = re.search(r"[KMGkmg][iI]", text)
        return f"; did you mean {near!r}" + (" (K, M and G are already powers of 1024)?" if binary else "?")
    try:
        number = float(text)
    except ValueError:
        return ""
    if number.is_integer() and 1 <= number < 1 << 63:
        return f"; did you mean {int(number)} ({text} bytes written out)?"
    return ""


def parse_size(value: Union[int, str], key: str, problems: list[str], limit: int = SWEEP_BYTES_MAX) -> int | None:
    """Bytes from 4096, "4K", "64M", "1G" (powers of 1024, as nccl-tests reads -b/-e). A number with an
    exponent ("1e9") or a space before the unit ("16 G") is refused rather than guessed: 1e9 is not 1G."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        m = _SIZE.match(str(value).strip()) if isinstance(value, str) else None
        if not m:
            problems.append(f"{key}: got {value!r}; expected bytes such as 8, 4K, 64M or 1G (a whole or decimal "
                            f"number, then K, M or G for powers of 1024, no space, no exponent){_size_hint(value)}")
            return None
        size = int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()])
    if size < 1:
        problems.append(f"{key}: got {value!r}; expected at least 1 byte")
        return None
    if size > limit:
        problems.append(f"{key}: got {value!r}; expected at most {limit} bytes ({limit >> 30}G)")
        return None
    return size


def dry_run_memory(sw: SweepConfig, world: int) -> tuple[str, str | None]:
    """The sweep's largest size against a device's memory: sweep.device_memory, else an assumed 80 GB GPU
    (a dry run sees no device; the real run checks the CUDA device's own total before it starts)."""
    scratch: list[str] = []
    hi = parse_size(sw.max_bytes, "sweep.max_bytes", scratch)
    given = sw.device_memory is not None
    device = parse_size(sw.device_memory, "sweep.device_memory", scratch, limit=1 << 40) if given \
        else ASSUMED_DEVICE_BYTES
    what = "sweep.device_memory" if given else "an assumed 80 GB GPU (set sweep.device_memory for another)"
    args = (sw.ops, hi, world, sw.dtype, sw.in_place, device, what)
    if problem := root_problem(sw.root, world):  # the run refused it only once its ranks had started
        return "", problem
    lo, step = parse_size(sw.min_bytes, "sweep.min_bytes", scratch), step_of(sw, scratch)
    n = count_sizes(lo, hi, sw.factor, step) if lo and hi else 0
    # how long it will be: the rows the tables will hold (one rank skips sendrecv; send/recv pairs, where asked
    # for, add up to two tables: a pair inside a node and one across nodes, where the world has them)
    ops = [op for op in sw.ops if op != "p2p_matrix" and not (op == "sendrecv" and world == 1)]
    pairs = 2 if sw.pairs and "sendrecv" in sw.ops and world > 1 else 0
    how = f"+{sw.step_bytes}" if step else f"x{sw.factor}"
    sizes_line = (f"# sweep sizes: {n} per collective ({sw.min_bytes} to {sw.max_bytes}, {how} each step) x "
                  f"{len(ops)} collectives = {n * len(ops)} rows"
                  + (f", and up to {pairs * n} more in sweep.pairs' {pairs} send/recv tables (a pair inside a node, "
                     "one across nodes, where the world has them)" if pairs else "")
                  + (" (sendrecv skipped: it needs at least 2 ranks)" if world == 1 and "sendrecv" in sw.ops else ""))
    return sizes_line + "\n" + dry_run_line(*args), memory_problem(*args)


def root_problem(root: int, world: int) -> str | None:
    """sweep.root against the world: a rank of it (the dry run plans for --world-size, the run checks its own)."""
    if 0 <= root < world:
        return None
    return f"sweep.root: got {root}; allowed: 0..{world - 1} at world size {world}"


def step_of(sw: SweepConfig, problems: list[str]) -> int | None:
    """sweep.step_bytes in bytes, or None (the sweep multiplies by sweep.factor)."""
    return None if sw.step_bytes is None else parse_size(sw.step_bytes, "sweep.step_bytes", problems)


def step_text(factor: int, step: int | None) -> str:
    """How the sweep steps, as its first line says it: x2 or +1048576."""
    return f"+{step}" if step else f"x{factor}"
