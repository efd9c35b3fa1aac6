"""The harness's step against a minimal hand loop, interleaved step by step in the same processes.

The harness is built and run through its own phases (trainer.run: open_run, set_up, build, train, close),
so every part of its step is in the measurement: batch building, the item-count all-reduce, the engine's
forward/backward, clipping, the optimizer, the one host sync, telemetry hooks, the metrics write and the
stop vote. A hook placed first in its hook list runs one step of the hand loop at the start of every
harness step, on a second copy of the same model (same recipe, seed, data, dp group and autocast):

    batches -> forward (summed CE / local answer tokens) -> backward (DDP) -> clip_grad_norm_ ->
    AdamW -> LambdaLR -> zero_grad -> one .item()

A harness iteration is timed from the end of the hook at step s to its start at step s + 1 (everything
the harness does for step s); the hand step is timed inside the hook. Steps after `warmup` are timed;
the last `profile` steps of each are run under torch.profiler (never timed), and their ops are summed
per name so the report says where the difference goes.
"""
from __future__ import annotations

import contextlib
import json
import os
import statistics
from collections import defaultdict
from pstats import Stats

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bench.support.cpu_clocks import CLOCKS, CallgrindSegments, read, threads_cpu, threads_cpu_delta, under_valgrind
from trainer.hook_list import Hooks

IGNORE = -100
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class HandLoop:
    """The minimal loop a user writes: no counts all-reduce, torch's clip_grad_norm_, one .item()."""

    def __init__(self, trainer):
        from trainer.optim import build_optimizer

        t = trainer
        wl = t.workload
        model = wl._materialize(wl.build_model())  # the same seeded init as the harness's model
        if t.layout.dp > 1 or t.layout.data_parallel == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [t.device.index] if t.device.type == "cuda" else None
            # no buffer broadcast before each forward: LoRA's buffers are constants, as the harness knows
            import inspect

            off = ({"forward_sync_buffers": False} if "forward_sync_buffers" in inspect.signature(DDP).parameters
                   else {"broadcast_buffers": False})
            model = DDP(model, process_group=t.dp_group, device_ids=ids, **off)
        self.model, self.t = model, t
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer, self.scheduler = build_optimizer(model, t.recipe.train, t.recipe.max_steps)
        self.clip = t.recipe.train.grad_clip
        model.train()

    def _autocast(self):
        dtype = self.t.autocast_dtype
        return torch.autocast(self.t.device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()

    def step(self, step: int) -> float:
        t = self.t
        batches = [t.train_set.batch(idx) for idx in t.sampler.micro_batches(step - 1)]
        n = max(1, sum(int((b["labels"][:, 1:] != IGNORE).sum()) for b in batches))
        total = torch.zeros((), device=t.device)
        for i, batch in enumerate(batches):
            sync = i == len(batches) - 1 or not hasattr(self.model, "no_sync")
            with contextlib.nullcontext() if sync else self.model.no_sync():
                ids = batch["input_ids"].to(t.device, non_blocking=True)
                labels = batch["labels"].to(t.device, non_blocking=True)
                with self._autocast():
                    logits = self.model(input_ids=ids).logits
                logits = logits[:, :-1].float()
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1),
                                       ignore_index=IGNORE, reduction="sum") / n
                loss.backward()
            total += loss.detach()
        if self.clip is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total.item()


def _op_times(prof) -> dict[str, list[float]]:
    """{op name: [self device-side-agnostic host time (us), calls, self cuda time (us)]} of one profile."""
    out: dict[str, list[float]] = {}
    for e in prof.key_averages():
        cuda = getattr(e, "self_device_time_total", 0.0) or 0.0
        out[e.key] = [e.self_cpu_time_total, e.count, cuda]
    return out


class Interleave(Hooks):
    """First in the harness's hook list: one hand step at each harness step's start, both timed."""

    def __init__(self, hand: HandLoop, warmup: int, profile: int, max_steps: int, activities, trace_dir=None):
        self.hand, self.warmup, self.profile, self.max_steps = hand, warmup, profile, max_steps
        self.activities, self.trace_dir = activities, trace_dir
        # per clock (bench/support/cpu_clocks.py: wall, the loop thread's CPU, the process's CPU): seconds per step
        self.harness_by: dict[str, list[float]] = {c: [] for c in CLOCKS}
        self.hand_by: dict[str, list[float]] = {c: [] for c in CLOCKS}
        self.harness_s, self.hand_s = self.harness_by["wall"], self.hand_by["wall"]
        self.threads_at: dict | None = None  # every thread's CPU when the timed steps began
        self.threads_cpu: dict[str, float] = {}
        self.callgrind = CallgrindSegments() if under_valgrind() else None
        self.harness_py: Stats | None = None  # Python calls (cProfile) in the profiled steps
        self.hand_py: Stats | None = None
        self.pyprof = None
        self.harness_ops: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0])
        self.hand_ops: dict[str, list[float]] = defaultdict(lambda: [0.0, 0, 0.0])
        self.profiled = {"harness": 0, "hand": 0}
        self.t_out: tuple | None = None
        self.prof = None  # the harness iteration now under the profiler

    def _profiled(self, step: int) -> bool:
        # the last `profile` harness iterations that have a following step to close them
        return step > self.max_steps - 1 - self.profile and step < self.max_steps

    def _sync(self) -> None:
        if self.hand.t.device.type == "cuda":
            torch.cuda.synchronize()

    def _profiler(self):
        return torch.profiler.profile(activities=self.activities)

    def _trace(self, prof, name: str, step: int) -> None:
        """With a trace directory: the Chrome trace of each profiled step and the profiler's own table."""
        if self.trace_dir and dist.get_rank() == 0:
            prof.export_chrome_trace(os.path.join(self.trace_dir, f"{name}_step{step}.json"))
            sort = "self_cuda_time_total" if len(self.activities) > 1 else "self_cpu_time_total"
            with open(os.path.join(self.trace_dir, f"{name}_table.txt"), "w", encoding="utf-8") as f:
                f.write(f"{name} loop, step {step}\n{prof.key_averages().table(sort_by=sort, row_limit=30)}\n")

    def on_step_start(self, step: int) -> None:
        self._sync()
        t_in = read()
        self._count_instructions(step, "harness")
        if self.prof is not None:  # the previous harness iteration was profiled
            self.harness_py = self._py_stop(self.harness_py)
            self.prof.stop()
            self._add(self.harness_ops, self.prof)
            self._trace(self.prof, "harness", step - 1)
            self.profiled["harness"] += 1
            self.prof = None
        elif self.t_out is not None and step - 1 > self.warmup:
            for c, a, b in zip(CLOCKS, t_in, self.t_out):
                self.harness_by[c].append(a - b)
        profiled = self._profiled(step)
        if step == self.warmup + 1:
            self.threads_at = threads_cpu()
        if profiled:
            if self.threads_at is not None and not self.threads_cpu:  # the timed steps end here
                self.threads_cpu = threads_cpu_delta(self.threads_at, threads_cpu())
            with self._profiler() as prof:
                self._py_start()
                self.hand.step(step)
                self._sync()
                self.hand_py = self._py_stop(self.hand_py)
            self._add(self.hand_ops, prof)
            self._trace(prof, "hand", step)
            self.profiled["hand"] += 1
        else:
            t0 = read()
            self.hand.step(step)
            self._sync()
            if step > self.warmup:
                for c, a, b in zip(CLOCKS, read(), t0):
                    self.hand_by[c].append(a - b)
            self._count_instructions(step, "hand")
        if profiled:
            self.prof = self._profiler()
            self.prof.start()
            self._py_start()
        self.t_out = read()

    def _count_instructions(self, step: int, what: str) -> None:
        """Under callgrind: a dump at each boundary of the timed steps (the profiled ones are left out)."""
        cg = self.callgrind
        if cg is None or step <= self.warmup:
            return
        if what == "harness":  # entering step `step`: the harness iteration of step - 1 ends
            if self._profiled(step):
                cg.end(f"harness {step - 1}")
            elif cg.on:
                cg.cut(f"harness {step - 1}")
            else:
                cg.begin()
        elif not self._profiled(step):
            cg.cut(f"hand {step}")

    def _py_start(self) -> None:
        import cProfile

        self.pyprof = cProfile.Profile()
        self.pyprof.enable()

    def _py_stop(self, into: Stats | None) -> Stats:
        self.pyprof.disable()
        stats = Stats(self.pyprof)
        self.pyprof = None
        if into is not None:
            into.add(stats)
            return into
        return stats

    @staticmethod
    def _add(into: dict, prof) -> None:
        for name, (cpu, count, cuda) in _op_times(prof).items():
            into[name][0] += cpu
            into[name][1] += count
            into[name][2] += cuda

    def result(self) -> dict:
        if self.trace_dir and dist.get_rank() == 0:  # the profiled steps' Python time, for `python -m pstats`
            for name, st in (("harness", self.harness_py), ("hand", self.hand_py)):
                if st is not None:
                    st.dump_stats(os.path.join(self.trace_dir, f"{name}.pstats"))
        h, p = statistics.median(self.harness_s), statistics.median(self.hand_s)
        steps = len(self.harness_s)
        return {"harness_step_s": h, "hand_step_s": p, **summary(self.harness_s, self.hand_s),
                "harness_steps_timed": steps, "hand_steps_timed": len(self.hand_s),
                "harness_samples_s": self.harness_s, "hand_samples_s": self.hand_s,
                "clocks": {c: clock_summary(self.harness_by[c], self.hand_by[c]) for c in CLOCKS},
                # CPU of each thread over the timed steps (both loops), per harness step: who the background is
                "threads_cpu_ms_per_step": {k: v / max(steps, 1) * 1e3 for k, v in self.threads_cpu.items()},
                "profiled_steps": self.profiled,
                "ops": breakdown(self.harness_ops, self.hand_ops, self.profiled),
                "python_calls": python_calls(self.harness_py, self.hand_py, self.profiled),
                "callgrind_segments": self.callgrind.labels if self.callgrind else None}


def clock_summary(harness: list[float], hand: list[float]) -> dict:
    """One clock's per-step seconds of both loops: medians, the ratios, and the spread of the adjacent pairs'
    ratios (10th-90th percentile)."""
    if not harness or not hand:
        return {}
    pairs = sorted(a / b for a, b in zip(harness, hand) if b > 0)
    return {"harness_ms": statistics.median(harness) * 1e3, "hand_ms": statistics.median(hand) * 1e3,
            **summary(harness, hand), "pairs_p10": _pct(pairs, 0.1), "pairs_p90": _pct(pairs, 0.9)}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def python_calls(harness: Stats | None, hand: Stats | None, profiled: dict, top: int = 15) -> dict:
    """Python function calls per step in the profiled steps (cProfile: a count, not a time), in total and
    the functions whose call counts differ most between the loops (with the harness's own time in them)."""
    if harness is None or hand is None:
        return {}
    nh, np_ = max(profiled["harness"], 1), max(profiled["hand"], 1)

    def per_fn(st: Stats, n: int) -> dict:
        return {_fn_name(k): (v[1] / n, v[2] / n) for k, v in st.stats.items()}  # (calls, own seconds)

    a, b = per_fn(harness, nh), per_fn(hand, np_)
    rows = [{"function": k, "harness_calls": a.get(k, (0, 0))[0], "hand_calls": b.get(k, (0, 0))[0],
             "harness_own_ms": a.get(k, (0, 0))[1] * 1e3, "hand_own_ms": b.get(k, (0, 0))[1] * 1e3}
            for k in set(a) | set(b)]
    rows = [r for r in rows if abs(r["harness_calls"] - r["hand_calls"]) > 1e-9]
    rows.sort(key=lambda r: -abs(r["harness_calls"] - r["hand_calls"]))
    return {"harness_per_step": harness.total_calls / nh, "hand_per_step": hand.total_calls / np_,
            "differ": rows[:top]}


def _fn_name(key: tuple) -> str:
    path, line, name = key
    for mark in ("site-packages/", "/lib/python"):
        if mark in path:
            path = path.split(mark, 1)[1]
            break
    else:
        path = os.path.relpath(path, REPO) if os.path.isabs(path) else path
    return f"{path}:{line}({name})" if line else name


def breakdown(harness: dict, hand: dict, profiled: dict) -> list[dict]:
    """Per op name: self host time per step (ms) and calls per step in each loop. Ops whose call counts
    differ come first (the structural difference: what one loop does that the other does not), then the
    rest by their time difference (on a shared 2-core machine mostly noise: the same ops, other timing)."""
    rows = []
    nh, np_ = max(profiled["harness"], 1), max(profiled["hand"], 1)
    for name in set(harness) | set(hand):
        a, b = harness.get(name, [0.0, 0, 0.0]), hand.get(name, [0.0, 0, 0.0])
        rows.append({"op": name, "harness_ms": a[0] / nh / 1e3, "hand_ms": b[0] / np_ / 1e3,
                     "harness_calls": a[1] / nh, "hand_calls": b[1] / np_,
                     "harness_device_ms": a[2] / nh / 1e3, "hand_device_ms": b[2] / np_ / 1e3})
    for r in rows:
        r["diff_ms"] = r["harness_ms"] - r["hand_ms"]
        r["calls_differ"] = abs(r["harness_calls"] - r["hand_calls"]) > 1e-9
    rows.sort(key=lambda r: (not r["calls_differ"], -abs(r["diff_ms"])))
    return rows


def summary(harness_s: list[float], hand_s: list[float]) -> dict:
    """Ratios of the medians, of the 10th percentiles (the least disturbed steps), and the median of
    each harness step over the hand step run just before it (drift cancels)."""
    pairs = [h / p for h, p in zip(harness_s, hand_s)]
    return {"ratio": statistics.median(harness_s) / statistics.median(hand_s),
            "ratio_p10": _pct(harness_s, 0.1) / _pct(hand_s, 0.1),
            "ratio_paired_median": statistics.median(pairs)}


def run_worker(recipe_path: str, overrides: list[str], warmup: int, profile: int, result_path: str,
               trace_dir: str | None = None) -> None:
    """Under torchrun (or alone: a gloo group of one): the harness with the hand loop interleaved."""
    from trainer.config import load_recipe
    from trainer.layout import resolve_layout
    from trainer.launcher_env import env_world_size
    from trainer.run import build, close, open_run, set_up, train
    from trainer.runlock import RunLock

    recipe = load_recipe(recipe_path, overrides)
    layout, problems = resolve_layout(recipe, env_world_size())
    if problems:
        raise SystemExit("error: " + "; ".join(problems))
    rank = int(os.environ.get("RANK", "0"))
    os.makedirs(recipe.output_dir, exist_ok=True)
    lock = RunLock(recipe.output_dir, rank)
    problem = lock.acquire()
    if problem:
        raise SystemExit(f"error: {problem}")
    st = open_run(recipe, layout, rank, lock, ["bench"], overrides)
    try:
        set_up(st)
        build(st)
        hand = HandLoop(st.trainer)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if st.device.type == "cuda":
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        probe = Interleave(hand, warmup, profile, recipe.max_steps, acts, trace_dir)
        st.hooks.hooks.insert(0, probe)
        train(st)
        st.status, st.code = "completed", 0
        if rank == 0:
            res = probe.result()
            res.update(world_size=layout.world_size, device=st.device.type,
                       device_name=torch.cuda.get_device_name(st.device) if st.device.type == "cuda" else None)
            with open(result_path, "w", encoding="utf-8") as f:
                json.dump(res, f)
    finally:
        close(st)


def op_table(rows: list[dict], device: bool = False) -> str:
    head = f"{'op (* = call counts differ)':<44} {'harness ms':>10} {'hand ms':>9} {'diff ms':>8} {'calls h/p':>13}"
    if device:
        head += f" {'dev ms h/p':>15}"
    lines = [head]
    for r in rows:
        name = ("* " if r.get("calls_differ") else "  ") + r["op"]
        line = (f"{name[:44]:<44} {r['harness_ms']:>10.3f} {r['hand_ms']:>9.3f} {r['diff_ms']:>+8.3f} "
                f"{r['harness_calls']:>6.0f}/{r['hand_calls']:<6.0f}")
        if device:
            line += f" {r['harness_device_ms']:>7.2f}/{r['hand_device_ms']:<7.2f}"
        lines.append(line)
    return "\n".join(lines)
