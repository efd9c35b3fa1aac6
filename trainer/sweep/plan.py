"""What a collective sweep allocates, per rank, at each size: without torch, so that `--dry-run` can
check a 16 GB sweep on a laptop before a 64-GPU job waits in a queue for it.

Sizes follow nccl-tests (its `setupArgs`/`getCollByteCount`): S bytes is S / element size elements in
all; reduce_scatter, all_gather and alltoall give each rank count = S / size / ranks (rounded down, and 0
below ranks x element size: nccl-tests then runs and prints a zero-element collective, size 0), the others
count = S / size. Every requested size keeps its own row; the JSON keeps the requested size beside it.

Per rank the sweep holds the collective's send and receive buffers and nothing that grows with the rank
count: operands are filled from a formula of (rank, index), results checked against the formula in
chunks of CHECK_CHUNK elements, and one size's buffers are freed before the next size's are made.
"""
from __future__ import annotations

ELEMENT_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "int8": 1,
                "uint8": 1}
# Size S counts the whole collective's data: for these, each rank holds S/n (nccl-tests' convention).
PER_RANK_SPLIT = {"reduce_scatter", "all_gather", "all_to_all"}
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
        if op in ("all_reduce", "broadcast"):
            need.append(total)  # one buffer (torch has only the in-place form)
        elif op in ("reduce_scatter", "all_gather"):
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
    """(bytes per rank, op) of the hungriest op at the largest size."""
    elsize = ELEMENT_SIZE[dtype]
    return max((buffer_bytes(op, max_bytes, world, elsize, in_place), op) for op in ops)


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
    return (f"# sweep memory: the largest size, {human(max_bytes)}, needs {human(need)} per rank ({op}, send and "
            f"receive buffers; the same at any rank count) + {human(DEVICE_RESERVE_BYTES)} reserve; "
            f"checked against {what}, {human(device_bytes)}")
