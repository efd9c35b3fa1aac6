"""What the collective tracer adds to each call it wraps, on this machine: microseconds per call.

    python -m bench.tracer_call_cost [--calls 20000] [--out FILE]

Two figures: (1) naming a call's arguments, `inspect.Signature.bind` + `apply_defaults` (what the wrappers
did) against `telemetry.capture.collective_calls.arguments_of` (what they do), for each torch.distributed
and functional-collective entry point the tracer wraps, called as the harness's own code and torch's
calls them; (2) a whole traced `dist.all_reduce` of 4 floats on a world-1 gloo group, and the wrapper's own share of
it (the time outside the function it wraps), in one process. A tensor-parallel step makes hundreds of functional-collective calls (one per
row-parallel output and per column-parallel input gradient), so each microsecond here is paid hundreds of
times a step on the training thread. Results: one JSON line in bench/results/tracer_call_cost.jsonl.
"""
from __future__ import annotations

import argparse
import inspect
import os
import platform
import statistics
import time

import torch
import torch.distributed as dist

from bench.support.results import REPO, append_line, line_start

RESULTS = os.path.join(REPO, "bench", "results", "tracer_call_cost.jsonl")
MACHINE = f"2-core CPU dev VM ({platform.machine()}, {os.cpu_count()} cores)"


def per_call_us(fn, calls: int, repeats: int = 5) -> float:
    """The median over `repeats` of the mean time of `calls` calls, in microseconds."""
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(runs)


def naming_costs(calls: int) -> dict:
    import torch.distributed._functional_collectives as funcol

    from telemetry.capture.collective_calls import arguments_of

    t = torch.zeros(4)
    # (module, name, args, kwargs): as trainer/loop.py, telemetry and DTensor's TP layers call them
    cases = [(dist, "all_reduce", (t,), {"group": None}), (dist, "all_reduce", (t,), {"group": None, "async_op": True}),
             (dist, "isend", (t, 1), {"group": None}), (dist, "all_gather_into_tensor", (t, t), {"group": None}),
             (funcol, "all_reduce", (t, "sum", None), {}), (funcol, "all_gather_tensor", (t, 0, None), {}),
             (funcol, "reduce_scatter_tensor", (t, "sum", 0, None), {})]
    out = {}
    for module, name, args, kwargs in cases:
        fn = getattr(module, name, None)
        if fn is None:
            continue
        sig, named = inspect.signature(fn), arguments_of(fn)

        def bind(sig=sig, args=args, kwargs=kwargs):
            b = sig.bind(*args, **kwargs)
            b.apply_defaults()
            return b.arguments

        key = f"{module.__name__.rsplit('.', 1)[-1]}.{name}({len(args)} positional, {sorted(kwargs)})"
        out[key] = {"bind_us": per_call_us(bind, calls), "arguments_of_us": per_call_us(lambda: named(args, kwargs),
                                                                                       calls)}
    return out


def traced_call_cost(calls: int) -> dict:
    """A world-1 gloo group in this process: `dist.all_reduce` of 4 floats unwrapped, then traced. The call
    underneath the tracer is timed too, so the wrapper's own time per call is the traced call's less the
    time spent inside the function it wraps (gloo's own time per call varies by tens of microseconds from
    pass to pass on a shared VM; the difference of two passes would carry that)."""
    import functools

    from telemetry.capture.collectives import CollectiveTracer

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    orig, inside = dist.all_reduce, [0.0]

    @functools.wraps(orig)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return orig(*args, **kwargs)
        finally:
            inside[0] += time.perf_counter() - t0

    try:
        t = torch.zeros(4)
        dist.all_reduce = timed
        plain = per_call_us(lambda: dist.all_reduce(t), calls)
        tracer = CollectiveTracer().install()
        try:
            totals, own = [], []
            for _ in range(6):  # a step per pass (the step's call list stays bounded); the first warms up
                tracer.begin_step()
                inside[0] = 0.0
                t0 = time.perf_counter()
                for _ in range(calls // 5):
                    dist.all_reduce(t)
                total = time.perf_counter() - t0
                tracer.end_step()
                totals.append(total / (calls // 5) * 1e6)
                own.append((total - inside[0]) / (calls // 5) * 1e6)
        finally:
            tracer.uninstall()
    finally:
        dist.all_reduce = orig
        dist.destroy_process_group()
    return {"untraced_us": plain, "traced_us": statistics.median(totals[1:]),
            "wrapper_own_us": statistics.median(own[1:])}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--out", default=RESULTS, help="append the result as a JSON line here ('' for none)")
    args = p.parse_args(argv)
    if args.calls < 100:
        raise SystemExit(f"error: --calls {args.calls}; allowed: >= 100")
    naming = naming_costs(args.calls)
    for k, v in naming.items():
        print(f"{k:<75} bind {v['bind_us']:5.2f} us, arguments_of {v['arguments_of_us']:5.2f} us")
    whole = traced_call_cost(args.calls)
    print(f"dist.all_reduce of 4 floats, world-1 gloo: {whole['untraced_us']:.1f} us untraced, "
          f"{whole['traced_us']:.1f} us traced, of which the tracer's wrapper {whole['wrapper_own_us']:.1f} us")
    append_line(args.out, {**line_start("bench.tracer_call_cost", argv, MACHINE), "torch": torch.__version__,
                           "naming": naming, "all_reduce_world1_gloo": whole})


if __name__ == "__main__":
    main()
