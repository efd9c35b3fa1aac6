"""Exposed communication from profiled windows: time spent communicating while no compute runs.

Overlapped communication is free; exposed communication is what a faster fabric would give back.
The profiler is too costly to keep on (6-25% of a small model's step here), so it runs for a window of
steps every `profile_every` steps, and those steps are marked `profiled` in the metrics.

Intervals: communication = CPU ops named gloo:* / nccl:* and device kernels named nccl*; compute =
device kernels that are not NCCL's when there is a GPU, else CPU aten:: ops on threads that are not
gloo's worker threads (gloo runs collectives on its own threads, measured to span the transfer, but
send/recv on the calling thread). Exposed = union(communication) minus union(compute), inside the window.
"""
from __future__ import annotations

from telemetry.rundir import StepKey

COMM_PREFIXES = ("gloo:", "nccl:")
# the collective's op on the calling thread: issuing it, which on gloo was seen to take up to 20 ms of a
# loaded machine's step before gloo's thread started the transfer (the caller waits meanwhile)
CALLER_PREFIX = "c10d::"
NCCL_KERNELS = ("ncclDevKernel", "ncclKernel")
# profiler names -> our collective types
_OP_NAMES = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
             "allgather": "all_gather", "_allgather_base": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
             "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter",
             "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all": "all_to_all",
             "alltoall": "all_to_all", "alltoall_base": "all_to_all", "broadcast": "broadcast", "send": "send",
             "recv": "recv", "barrier": "barrier", "reduce": "reduce",
             # c10d:: op names (the calling thread's side)
             "allgather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
             "reduce_scatter_base": "reduce_scatter", "allreduce_coalesced": "all_reduce",
             "recv_any_source": "recv"}


def collective_type(name: str) -> str | None:
    if name.startswith(COMM_PREFIXES):
        raw = name.split(":", 1)[1]
        return _OP_NAMES.get(raw, raw)
    if name.startswith(CALLER_PREFIX):  # c10d::allreduce_, c10d::_allgather_base_, c10d::recv_, ...
        raw = name[len(CALLER_PREFIX):].strip("_")
        return _OP_NAMES.get(raw, raw)
    if name.startswith(NCCL_KERNELS):
        low = name.lower()
        for key, op in (("allreduce", "all_reduce"), ("reducescatter", "reduce_scatter"),
                        ("allgather", "all_gather"), ("sendrecv", "send"), ("broadcast", "broadcast"),
                        ("reduce", "reduce")):
            if key in low:
                return op
        return "other"
    return None


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def _length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def _subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """a minus b, both unions (sorted, disjoint)."""
    out, j = [], 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def analyse(events: list[dict], window: tuple[float, float], on_gpu: bool) -> dict:
    """events: dicts with name, start, end (same unit as window), thread, device ('cpu'/'cuda')."""
    lo, hi = window
    comm_by_op: dict[str, list] = {}
    comm_threads = set()
    for e in events:
        op = collective_type(e["name"])
        if op is None:
            continue
        if on_gpu and e["device"] != "cuda":
            continue  # on GPU the kernels are the communication; CPU-side ops only enqueue
        comm_by_op.setdefault(op, []).append((max(e["start"], lo), min(e["end"], hi)))
        if e["name"].startswith(CALLER_PREFIX):
            continue  # the caller's thread computes at other times
        if e["device"] == "cpu" and op not in ("send", "recv"):  # gloo runs send/recv on the caller's thread
            comm_threads.add(e["thread"])
    compute = []
    for e in events:
        if collective_type(e["name"]) is not None:
            continue
        if on_gpu:
            if e["device"] == "cuda":
                compute.append((e["start"], e["end"]))
        elif e["name"].startswith("aten::") and e["thread"] not in comm_threads:
            compute.append((e["start"], e["end"]))
    compute_u = _union([(max(a, lo), min(b, hi)) for a, b in compute if b > lo and a < hi])
    span = max(hi - lo, 1e-12)
    all_comm = _union([iv for ivs in comm_by_op.values() for iv in ivs if iv[1] > iv[0]])
    per_op = {}
    for op, ivs in comm_by_op.items():
        u = _union([iv for iv in ivs if iv[1] > iv[0]])
        exposed = _length(_subtract(u, compute_u))
        per_op[op] = {"comm_s": _length(u), "exposed_s": exposed, "exposed_share": exposed / span}
    exposed_total = _length(_subtract(all_comm, compute_u))
    return {"window_s": span, "comm_s": _length(all_comm), "compute_s": _length(compute_u),
            "exposed_s": exposed_total, "exposed_share": exposed_total / span,
            "comm_share": _length(all_comm) / span, "by_op": per_op}


def events_from_profiler(prof) -> list[dict]:
    """Flatten profiler events into the dicts `analyse` takes (times in seconds).

    Reads the raw kineto events: `prof.events()` builds a function-event tree and was measured to cost
    1.8-3x a small model's step on the development machines.
    """
    out = []
    for e in prof.profiler.kineto_results.events():
        device = "cuda" if str(e.device_type()).endswith("CUDA") else "cpu"
        out.append({"name": e.name(), "start": e.start_ns() / 1e9, "end": e.end_ns() / 1e9,
                    "thread": e.start_thread_id(), "device": device})
    return out


class ProfiledWindows:
    """Profiles `steps` consecutive steps every `every` steps (0 = never); analyses each window."""

    def __init__(self, every: int, steps: int, on_gpu: bool, trace_dir: str | None = None, rank: int = 0):
        self.every, self.steps, self.on_gpu = every, max(steps, 1), on_gpu
        self.trace_dir, self.rank = trace_dir, rank
        self._prof = None
        self._start_step = None

    def wants(self, step: int) -> bool:
        return bool(self.every) and step % self.every < self.steps and step >= self.every

    def start(self, step: int) -> None:
        if self._prof is not None or not self.wants(step):
            return
        import time

        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.on_gpu else [])
        self._prof = profile(activities=activities, record_shapes=False, with_stack=False)
        self._prof.__enter__()
        self._start_step = step
        self._t0 = time.perf_counter()

    def active(self) -> bool:
        return self._prof is not None

    def stop(self, step: int) -> dict | None:
        """Close the window after its last step; returns the analysis (None while still open)."""
        if self._prof is None or step < self._start_step + self.steps - 1:
            return None
        import os

        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        events = events_from_profiler(prof)
        if not events:
            return None
        window = (min(e["start"] for e in events), max(e["end"] for e in events))
        result = analyse(events, window, self.on_gpu)
        result["steps"] = [self._start_step, step]
        if self.trace_dir:
            path = os.path.join(self.trace_dir, f"trace.rank{self.rank:05d}.step{self._start_step}.json")
            prof.export_chrome_trace(path)
            result["trace"] = os.path.basename(path)
        return result


# ---------------------------------------------------------------- every step: an estimate from the tracer

HOST_TIMED_ONLY = ("estimated from host timestamps, which gloo's calls have; a NCCL call's time is its "
                   "kernels' on the device: profiled windows (telemetry.profile_every) measure it")


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """a and b, both unions."""
    return _subtract(a, _subtract(a, b))


def call_intervals(calls, window: tuple[float, float]) -> list[tuple[float, float]]:
    """Timed calls as intervals clipped to the window. Host-timed calls (gloo) are issue to completion;
    device-timed ones (NCCL) where the tracer placed them on the device timeline (`t_start`..`t_done`,
    CollectiveTracer.place), else laid end to end per group from their issue times, since a group's
    works run one after another on its stream."""
    lo, hi = window
    out, busy_until = [], {}
    for c in sorted((c for c in calls if c.duration_s is not None), key=lambda c: c.t_issue):
        if c.t_done is not None:
            start, end = (c.t_start if getattr(c, "t_start", None) is not None else c.t_issue), c.t_done
        else:
            start = max(c.t_issue, busy_until.get(c.token, c.t_issue))
            end = busy_until[c.token] = start + c.duration_s
        start, end = max(start, lo), min(end, hi)
        if end > start:
            out.append((start, end))
    return _union(out)


def _phases(marks: list[tuple[str, float]], phase: str):
    """(begin, end) of each `phase` ("backward", "optimizer") the loop marked, in order."""
    begin = None
    for name, t in marks:
        if name == f"{phase}_begin":
            begin = t
        elif name == f"{phase}_end" and begin is not None:
            yield begin, t
            begin = None


def _issued_in_backward(calls, marks: list[tuple[str, float]]):
    """(end of the pass, the asynchronous calls issued during it) for each backward pass marked."""
    for begin, end in _phases(marks, "backward"):
        yield end, [c for c in calls if not c.blocking and begin <= c.t_issue <= end]


def _walk(order, start: float, per_byte: float) -> tuple[float, list[tuple[float, float]]]:
    """The reducer's tail from `start`: wait for each bucket in issue order if not back, then copy it."""
    t, gaps = start, []
    for c in order:
        if c.t_done > t:
            gaps.append((t, c.t_done))
            t = c.t_done
        t += per_byte * c.nbytes
    return t, gaps


def _tail(issued) -> tuple[list, float]:
    """The calls in issue order, and when the last issue handed the thread back (the tail's start)."""
    order = sorted(issued, key=lambda c: c.t_issue)
    return order, max(c.t_returned or c.t_issue for c in order)


def tail_rate(issued, end: float) -> tuple[float, list[tuple[float, float]]] | None:
    """The copy cost per byte that makes a backward pass's tail end at `end`, and the tail's waits at that
    cost (see `tail_waits`); None where the calls lack completion times or the tail is empty."""
    if not issued:
        return None
    order, start = _tail(issued)
    if any(c.t_done is None for c in order) or end <= start:
        return None
    total = sum(c.nbytes for c in order)
    lo = 0.0  # per byte; stays 0 where the waits alone fill the tail (no time left for copies)
    if total and _walk(order, start, 0.0)[0] < end:
        hi = (end - start) / total
        for _ in range(40):  # the walk's end grows with the rate: bisect for the rate that ends the pass at `end`
            mid = (lo + hi) / 2
            if _walk(order, start, mid)[0] < end:
                lo = mid
            else:
                hi = mid
    return lo, [(a, min(b, end)) for a, b in _walk(order, start, lo)[1] if min(b, end) > a]


def tail_waits(issued, end: float, per_byte: float | None = None) -> list[tuple[float, float]]:
    """When the thread waited in a backward pass's tail, from its last asynchronous issue to `end`.

    After the last bucket goes out, DDP's reducer takes the buckets in the order it issued them: it waits
    for each one still in flight, then copies its result into the gradients. The profiler shows those
    copies running while later buckets are on the wire (hidden communication), and only the stretches
    before a not-yet-complete bucket as waiting. The copies are not traced, so each is taken to cost the
    same per byte: `per_byte` where given (CopyRate: a machine's rate from earlier steps), else the rate
    that makes the pass end when it was marked to end (one unknown, one equation). Calls without a
    completion time leave the whole tail as waiting (an upper bound)."""
    return _waits_at(issued, end, tail_rate(issued, end), per_byte)


def _waits_at(issued, end: float, solved, per_byte: float | None) -> list[tuple[float, float]]:
    """`tail_waits` from the tail's own solution (`tail_rate`'s answer), already at hand."""
    if not issued:
        return []
    order, start = _tail(issued)
    if solved is None:
        return [(order[-1].t_issue, end)] if end > start else []
    rate, gaps = solved
    if per_byte is None or per_byte >= rate:
        return gaps
    return [(a, min(b, end)) for a, b in _walk(order, start, per_byte)[1] if min(b, end) > a]


class CopyRate:
    """The reducer's copy cost per byte, learnt over steps.

    A step's solved rate (`tail_rate`) is an upper bound: besides the copies, the tail holds the thread's
    wake-up after each wait (measured on a profiled DDP step: 0.1-3.7 ms between a bucket's completion and
    its copy), which the one-unknown fit spreads over every copy, so the copies between in-flight buckets
    come out about twice as long as the profiler shows them and the waits between them too short. The
    least rate of the last `keep` steps is the one least inflated; a copy does not get cheaper from one
    step to the next, so the least is the machine's rate plus the least wake-up."""

    def __init__(self, keep: int = 20):
        self.keep, self._seen = keep, []

    def observe(self, rate: float) -> None:
        self._seen = (self._seen + [rate])[-self.keep:]

    @property
    def per_byte(self) -> float | None:
        return min(self._seen) if self._seen else None


def waiting_intervals(calls, marks: list[tuple[str, float]], window: tuple[float, float],
                      copy_rate: CopyRate | None = None) -> list[tuple[float, float]]:
    """When the training thread was waiting, as far as the tracer and the loop's phase marks show:
    - a blocking call, issue to completion (it ran on the caller's thread);
    - an asynchronous call while it was being issued (gloo was seen to take up to 20 ms to hand a
      loaded machine's caller its thread back);
    - the tail of a backward pass that issued asynchronous calls (DDP's buckets), after its last issue,
      where it waited for a call not yet complete (`tail_waits`).
    Elsewhere the thread is taken to be computing, so communication waited on at some other point
    (an asynchronous call's wait() after unrelated work) counts as hidden: a lower bound there."""
    lo, hi = window
    waits = [(c.t_issue, c.t_done) for c in calls if c.blocking and c.t_done is not None]
    waits += [(c.t_issue, c.t_returned) for c in calls if not c.blocking and c.t_returned is not None]
    for end, issued in _issued_in_backward(calls, marks):
        solved = tail_rate(issued, end)  # solved once: the bisection is the costly part
        if copy_rate is not None and solved is not None:
            copy_rate.observe(solved[0])  # this step's own tail counts too: the least rate so far
        waits += _waits_at(issued, end, solved, copy_rate.per_byte if copy_rate is not None else None)
    return _union([(max(a, lo), min(b, hi)) for a, b in waits if min(b, hi) > max(a, lo)])


def overlap_window(calls, marks: list[tuple[str, float]], window: tuple[float, float]) -> float:
    """Compute time a step's backward pass ran with its asynchronous collectives already issued: from the
    first call issued during backward to the last, less the time spent issuing. DDP's buckets (and
    ZeRO's reductions) go out as gradients become ready, so this is the compute that a slower link can
    hide communication behind; after the last issue the pass only waits. 0 where backward issued
    nothing asynchronous (a blocking all-reduce after backward hides nothing)."""
    lo, hi = window
    total = 0.0
    for _, issued in _issued_in_backward(calls, marks):
        if len(issued) < 2:
            continue
        span = [(max(min(c.t_issue for c in issued), lo), min(max(c.t_issue for c in issued), hi))]
        if span[0][1] > span[0][0]:
            issuing = _union([(c.t_issue, c.t_returned) for c in issued
                              if c.t_returned is not None and c.t_returned > c.t_issue])
            total += _length(_subtract(span, issuing))
    return total


def phase_times(marks: list[tuple[str, float]]) -> dict:
    """The optimizer's time in the step (`optimizer_s`), from the loop's phase marks; absent where the loop
    marks no optimizer step. The projection keeps it when each rank's share of the batch changes: a
    replicated optimizer step costs the same whatever the batch."""
    spans = list(_phases(marks, "optimizer"))
    return {StepKey.OPTIMIZER_S: sum(end - begin for begin, end in spans)} if spans else {}


def step_comm_times(calls, marks: list[tuple[str, float]], window: tuple[float, float],
                    copy_rate: CopyRate | None = None) -> dict:
    """A step's communication time and its exposed part, both within the step's window, so that
    exposed <= communication <= the window by construction.

    comm_time_s: wall time with at least one timed call in flight (concurrent calls count once);
    null when the step had calls and none was timed. exposed_comm_s: the part of it in which the
    training thread waited (`waiting_intervals`); null, with `exposed_comm_reason`, where the calls
    are timed on the device (NCCL)."""
    timed = [c for c in calls if c.duration_s is not None]
    comm = call_intervals(timed, window)
    out = {StepKey.COMM_TIME_S: _length(comm) if timed or not calls else None}
    if any(c.t_done is None for c in timed):
        out.update(exposed_comm_s=None, exposed_comm_reason=HOST_TIMED_ONLY)
    elif out[StepKey.COMM_TIME_S] is None:
        out.update(exposed_comm_s=None, exposed_comm_reason="no call of the step was timed")
    else:
        out[StepKey.EXPOSED_COMM_S] = _length(_intersect(comm, waiting_intervals(calls, marks, window, copy_rate)))
    # what a slower fabric could still hide (telemetry/analysis/projection.py); host issue times, so known on NCCL too
    out[StepKey.OVERLAP_WINDOW_S] = overlap_window(calls, marks, window) if calls else 0.0
    return out
