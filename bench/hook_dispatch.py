"""Cost of NCCL completion reports to the tracer at 100,000 reports/s: microseconds per report on the hook
thread, the training thread's loss of Python throughput while they arrive, and the step end's matching.

    python -m bench.hook_dispatch [--rate 100000] [--calls 7700] [--steps 6] [--baseline /path/to/older/checkout]

ProcessGroupNCCL calls the registered hook once per completed work on its `pt_nccl_runhook` thread, under
the GIL (~7,700 works per llama70b_lora step). The bench stands in for that thread: a Python thread calls the
hook the tracer registered on a pretend group (`_register_on_completion_hook` kept, no NCCL) with WorkInfo-
shaped reports, paced at `--rate`, while the main thread (the training loop) runs pure-Python work and then
ends the step. A control pass calls a do-nothing hook at the same pace: the figures are the differences.
The real hook thread also takes the GIL from C++ for each report, which this Python thread does not model
(the same for both codes). `--baseline` measures another checkout the same way (e.g. the code before the
reports were batched). Results: one JSON line per code in bench/results/hook_dispatch.jsonl.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from bench.support.results import append_result

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "bench", "results", "hook_dispatch.jsonl")


def _work(stop: threading.Event) -> int:
    """The training thread's stand-in: pure-Python work, counted, until told to stop."""
    n, acc = 0, 0
    while not stop.is_set():
        for i in range(200):
            acc += i * i
        n += 1
    return n


def _deliver(hook, reports: list, rate: float, out: dict) -> None:
    """The hook thread: every report, paced at `rate` per second in batches of 100; its CPU time in `out`."""
    batch = 100
    t0, c0 = time.perf_counter(), time.thread_time()
    for k in range(0, len(reports), batch):
        for info in reports[k:k + batch]:
            hook(info)
        wait = t0 + (k + batch) / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
    out["cpu_s"], out["wall_s"] = time.thread_time() - c0, time.perf_counter() - t0


def worker(rate: float, calls: int, steps: int) -> dict:
    import torch
    from torch._C._distributed_c10d import OpType
    from types import SimpleNamespace

    from telemetry.capture import completion_hooks
    from telemetry.capture.collectives import DIST_SPECS, CollectiveTracer

    class PretendGroup:  # what the tracer needs of a ProcessGroupNCCL here: a size, a name, the hook
        group_name, ranks, hook = "pretend", [0, 1], None

        def size(self):
            return 2

        def _register_on_completion_hook(self, hook):
            self.hook = hook

    completion_hooks.backend_name = lambda pg: "nccl"
    pg = PretendGroup()
    tracer = CollectiveTracer()
    reduce = tracer._wrap_dist("all_reduce", lambda tensor, op=None, group=None, async_op=False: None,
                               DIST_SPECS["all_reduce"])
    tensor = torch.ones(16)
    info = SimpleNamespace(op_type=OpType.ALLREDUCE, seq=0, time_started=None, time_finished=None,
                           active_duration=datetime.timedelta(microseconds=50))
    reports = [info] * calls

    def one_step(hook, issue: bool) -> dict:
        tracer.begin_step()
        for _ in range(calls if issue else 0):  # the step's calls, queued for their reports before they come
            reduce(tensor, group=pg)
        stop, done, out = threading.Event(), {}, {}
        thread = threading.Thread(target=_deliver, args=(hook, reports, rate, out))
        t0 = time.perf_counter()
        thread.start()
        runner = threading.Thread(target=lambda: done.setdefault("n", _work(stop)))
        runner.start()
        thread.join()
        stop.set()
        runner.join()
        work_rate = done["n"] / (time.perf_counter() - t0)
        t1 = time.perf_counter()
        step = tracer.end_step()
        end_s = time.perf_counter() - t1
        timed = sum(1 for c in step.calls if c.duration_s is not None)
        return {"hook_cpu_s": out["cpu_s"], "wall_s": out["wall_s"], "work_rate": work_rate, "end_s": end_s,
                "timed": timed}

    tracer.begin_step()
    reduce(tensor, group=pg)  # registers the tracer's hook on the group
    pg.hook(info)
    tracer.end_step()
    real_hook = pg.hook
    noop = lambda info: None  # noqa: E731
    rows = {"tracer": [], "control": []}
    for _ in range(steps):  # interleaved: the 2 cores are shared
        rows["tracer"].append(one_step(real_hook, True))
        rows["control"].append(one_step(noop, False))  # no calls waiting: nothing left for the next step
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    t, c = rows["tracer"], rows["control"]
    return {
        "reports_per_step": calls, "rate_per_s": rate, "steps": steps,
        "achieved_rate_per_s": round(calls / med([r["wall_s"] for r in t])),
        "hook_us_per_report": round((med([r["hook_cpu_s"] for r in t]) - med([r["hook_cpu_s"] for r in c]))
                                    / calls * 1e6, 3),
        "hook_thread_cpu_share": round(med([r["hook_cpu_s"] / r["wall_s"] for r in t]), 4),
        "control_hook_thread_cpu_share": round(med([r["hook_cpu_s"] / r["wall_s"] for r in c]), 4),
        "training_thread_throughput_vs_control": round(med([r["work_rate"] for r in t])
                                                       / med([r["work_rate"] for r in c]), 4),
        "step_end_us_per_report": round(med([r["end_s"] for r in t]) / calls * 1e6, 3),
        "calls_timed_per_step": med([r["timed"] for r in t]),
    }


def main() -> int:
    if sys.argv[1:2] == ["--worker"]:
        rate, calls, steps = float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(worker(rate, calls, steps)))
        return 0
    p = argparse.ArgumentParser(prog="python -m bench.hook_dispatch", description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=100_000.0, help="reports per second on the hook thread")
    p.add_argument("--calls", type=int, default=7700, help="reports per step (llama70b_lora: ~7,700)")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--baseline", help="another checkout to measure the same way (e.g. the code before the change)")
    args = p.parse_args()
    codes = [("this tree", REPO)] + ([("baseline", os.path.abspath(args.baseline))] if args.baseline else [])
    for label, code in codes:
        env = {**os.environ, "PYTHONPATH": code}
        # the script by path from the code's own directory: its telemetry package is the one imported
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(args.rate),
                               str(args.calls), str(args.steps)], cwd=code, env=env, capture_output=True,
                              text=True, timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"error: the measurement of {label} ({code}) failed:\n{proc.stderr[-2000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        append_result(RESULTS, "bench.hook_dispatch", {"code": label, "code_path": code, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
