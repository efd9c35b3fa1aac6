"""`python -m telemetry watch RUN_DIR`: a live view of a running (or finished) run directory, for whoever has
no dashboard: over ssh on a login node, reading the shared filesystem the job writes.

It reads only what the run writes anyway (telemetry/rundir.py): run.json (name, max_steps, status, hosts),
metrics.jsonl (rank 0's line per step; a torn last line waits) and ranks/rankNNNNN.telemetry.jsonl (each
rank's own step and communication times), each followed from where it was last read. It shows step progress
with an ETA, each rank's step time and communication share, the slowest ranks with the straggler verdict
(telemetry/stragglers.py, the detector the run itself uses, replayed over metrics.jsonl), power, the
counters' verdict and, where the run records it, the collective timing's coverage. On a terminal it redraws in place (rich); otherwise it prints a few plain lines per new
step. It ends by itself when the run is no longer running; Ctrl-C ends it with status 130, no traceback.
Pure Python, no torch.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections import deque

from telemetry import stragglers
from telemetry.analysis import sweep_progress
from telemetry.formulas import sweep_pairs
from telemetry.analysis.runs import shape_problem
from telemetry.rundir import (
    METRICS, RANK_TELEMETRY, RUN_JSON, JsonlFollower, StepKey, is_step_record, rank_files, upgrade_record,
)

RECENT = 20  # steps the per-rank medians and the ETA look back over
SLOWEST = 3


RANK_TAIL_BYTES = 256 << 10  # of each rank file, read at start: its recent steps, not a long run's whole file
SHOWN_RANKS = 16  # more ranks than this: the slowest SLOWEST_SHOWN and a line for the rest
SLOWEST_SHOWN = 8


class RunWatch:
    """The run directory's state, brought up to date by `poll()`. A long run's history is not kept: the
    straggler detector and the counter sums are fed as lines come, the rest is the recent steps."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.info: dict = {}
        self.recent: deque = deque(maxlen=RECENT + 1)  # rank 0's newest metrics lines
        self.loss_events, self.loss_steps, self.reorder_events = 0.0, 0, 0.0
        self.detector: stragglers.StragglerDetector | None = None
        self._pending: list[dict] = []  # lines read before run.json named the hosts
        self._metrics = JsonlFollower(os.path.join(run_dir, METRICS), from_end=False)
        self._ranks: dict[int, JsonlFollower] = {}
        self.rank_lines: dict[int, deque] = {}
        self.sweep = sweep_progress.SweepProgress(run_dir)  # a collective sweep's table, as it is written

    def poll(self) -> bool:
        """Read what was added; True when there is something new."""
        new = False
        try:
            if not os.path.isfile(os.path.join(self.run_dir, RUN_JSON)):  # /dev/zero, a FIFO: never read to an end
                raise OSError("not a regular file")
            with open(os.path.join(self.run_dir, RUN_JSON), encoding="utf-8") as f:
                info = json.load(f)
            if isinstance(info, dict) and info != self.info and shape_problem(info) is None:
                self.info, new = info, True
        except (OSError, ValueError, RecursionError):
            pass  # not written yet, or being replaced: the last one read stands
        # a line that is not a readable step is damage, left out as the report leaves it out
        replaced = self._metrics.replaced
        rows = [r for r in self._metrics.new() if is_step_record(upgrade_record(r))]
        if self._metrics.replaced != replaced:  # a resume rewrote metrics.jsonl: what was read is the new file's
            self._forget_steps()
            new = True
        if rows:
            new = True
            self.recent.extend(rows)
            for r in rows:
                if _num(r.get(StepKey.JOB_LOSS_EVENTS)) is not None:
                    self.loss_events += r[StepKey.JOB_LOSS_EVENTS]
                    self.loss_steps += 1
                self.reorder_events += _num(r.get(StepKey.JOB_REORDER_EVENTS)) or 0.0
            self._pending += rows
        if self._pending and (self.info.get("hosts") or not self.running or len(self._pending) > 100):
            if self.detector is None:  # the run's own detector, fed as the run fed it
                hosts = [h.get("hostname") if isinstance(h, dict) else h for h in self.info.get("hosts") or []]
                self.detector = stragglers.StragglerDetector(hosts or None)
            for r in self._pending:
                self.detector.feed(r[StepKey.STEP], r)
            self._pending = []
        for path in rank_files(self.run_dir, RANK_TELEMETRY):
            m = re.search(rf"rank(\d+)\.{re.escape(RANK_TELEMETRY)}$", path)
            rank = int(m.group(1))
            if rank not in self._ranks:
                self._ranks[rank] = JsonlFollower(path, from_end=False, last_bytes=RANK_TAIL_BYTES)
                self.rank_lines[rank] = deque(maxlen=RECENT)
            lines = [r for r in self._ranks[rank].new() if is_step_record(upgrade_record(r))]
            if lines:
                self.rank_lines[rank].extend(lines)
                new = True
        return self.sweep.poll() or new

    def _forget_steps(self) -> None:
        """What the metrics lines fed (the file is read again from its start)."""
        self.recent.clear()
        self.loss_events, self.loss_steps, self.reorder_events = 0.0, 0, 0.0
        self.detector, self._pending = None, []

    @property
    def running(self) -> bool:
        return self.info.get("status", "running") == "running"

    def snapshot(self) -> dict:
        """What the view shows, as plain data (the renderers format it)."""
        info = self.info
        recipe = info.get("recipe") or {}
        sweep = recipe.get("workload") == "collectives"  # no steps: the recipe's max_steps is not its length
        max_steps = None if sweep else recipe.get("max_steps")
        last = self.recent[-1] if self.recent else {}
        step = last.get(StepKey.STEP)
        clock = [(m["step"], m["time"]) for m in self.recent if isinstance(m.get("time"), (int, float))]
        # per step, not per line: lines can skip steps (a resumed run, a lost line)
        per_step = ((clock[-1][1] - clock[0][1]) / (clock[-1][0] - clock[0][0])
                    if len(clock) > 1 and clock[-1][0] > clock[0][0] else last.get(StepKey.STEP_TIME_S))
        eta = (max_steps - step) * per_step if (self.running and isinstance(max_steps, int) and step is not None
                                                 and per_step) else None
        ranks = []
        for rank, lines in sorted(self.rank_lines.items()):
            if not lines:
                continue
            st = [x[StepKey.STEP_TIME_S] for x in lines if _num(x.get(StepKey.STEP_TIME_S))]
            ct = [x[StepKey.COMM_TIME_S] / x[StepKey.STEP_TIME_S] for x in lines
                  if _num(x.get(StepKey.COMM_TIME_S)) is not None and _num(x.get(StepKey.STEP_TIME_S))]
            ranks.append({"rank": rank, StepKey.STEP: lines[-1].get("step"),
                          StepKey.STEP_TIME_S: statistics.median(st) if st else None,
                          "comm_share": statistics.median(ct) if ct else None,
                          StepKey.GPU_POWER_W: lines[-1].get(StepKey.GPU_POWER_W),
                          "gpu_reason": _reason(lines[-1], StepKey.GPU_POWER_W, StepKey.GPU_ENERGY_REASON)})
        timed = [r for r in ranks if r[StepKey.STEP_TIME_S] is not None]
        slowest = sorted(timed, key=lambda r: -r[StepKey.STEP_TIME_S])
        found = (info.get("telemetry") or {}).get("stragglers") or (
            self.detector.summary() if self.detector else
            {"verdict": None, "reason": "no steps recorded yet"} if not self.recent else
            stragglers.StragglerDetector(None).summary())
        # why the job's GPU power is unknown: the job's reason, else rank 0's (metrics.jsonl), else a rank's
        gpu_reason = (_reason(last, StepKey.JOB_GPU_POWER_W, StepKey.JOB_GPU_ENERGY_REASON)
                      or _reason(last, StepKey.JOB_GPU_POWER_W, StepKey.GPU_ENERGY_REASON)
                      or next((r["gpu_reason"] for r in ranks if r["gpu_reason"]), None)) if last else None
        recorded = ((info.get("telemetry") or {}).get("counters") or {}).get("verdict")
        if recorded:
            counters = f"{recorded} (run.json)"
        elif self.loss_steps:
            lost, n = self.loss_events, self.loss_steps
            counters = (f"clean: 0 loss events in {n} steps" if lost == 0 else
                        f"LOSS: {lost:g} drop/discard/error events in {n} steps")
            if self.reorder_events:
                counters += f"; {self.reorder_events:g} packets reordered"
        else:
            counters = "not read (no NIC counters recorded yet)"
        counters += _lab_queues(info, self.run_dir)
        shown, rest = ranks, None
        if len(ranks) > SHOWN_RANKS:  # a big job: the slowest, and the others summed up
            shown = sorted(slowest[:SLOWEST_SHOWN], key=lambda r: r["rank"])
            others = [r[StepKey.STEP_TIME_S] for r in slowest[SLOWEST_SHOWN:]]
            rest = {"ranks": len(ranks) - len(shown), "median_step_time_s": statistics.median(others) if others else None}
        return {"name": info.get("name") or os.path.basename(os.path.normpath(self.run_dir)),
                "status": info.get("status") or "starting", "recorded": bool(info), StepKey.STEP: step, "max_steps": max_steps, "sweep": sweep,
                "sweep_progress": self.sweep.snapshot() if sweep else None,
                # None where the recipe does not list them (not "no test": that is sweep.ops=[p2p_matrix])
                "sweep_ops": _sweep_tests(recipe, info.get("hosts")) if sweep else None,
                "eta_s": eta, "s_per_step": per_step, StepKey.LOSS: last.get(StepKey.LOSS),
                StepKey.TOKENS_PER_S: last.get(StepKey.TOKENS_PER_S),
                StepKey.JOB_GPU_POWER_W: last.get(StepKey.JOB_GPU_POWER_W), "gpu_reason": gpu_reason,
                StepKey.JOB_SERVER_POWER_W: last.get(StepKey.JOB_SERVER_POWER_W), "ranks": shown, "other_ranks": rest,
                "slowest": slowest[:SLOWEST], "straggler": found, "counters": counters, "error": info.get("error"),
                "coverage": (last.get(StepKey.COMM_HEALTH) or {}).get("verdict")}


def _lab_queues(info: dict, run_dir: str) -> str:
    """A fabric lab run's shaped queues, which the interface counters above never see: a lab run read `clean`
    while its queues had dropped 271 packets at start-up. Their drops are read from tc as the lab tears down."""
    from telemetry.analysis.fabric_summary import lab_drops_text, lab_links

    lab = (info.get("fabric") or {}).get("lab") or {}
    if not (lab.get("rate_bps") or lab.get("slow_rate_bps")):
        return ""
    text = lab_drops_text(run_dir)
    if text == "queue drops not recorded" and info.get("status") in (None, "starting", "running"):
        text = "queue drops are read as the lab tears down"
    return f"; lab links {lab_links(lab)}: {text} (lab.json)"


def _sweep_tests(recipe: dict, hosts) -> list[str] | None:
    """The tests a sweep's recipe plans, in the order it runs them: its ops (p2p_matrix is no test of sizes),
    then, with sweep.pairs and sendrecv, a send/recv test per pair the hosts have (known once run.json names
    them). None where run.json's recipe does not say the ops as a list (another shape is not guessed at: the
    tests already started are shown)."""
    sweep = recipe.get("sweep") if isinstance(recipe, dict) and isinstance(recipe.get("sweep"), dict) else {}
    ops = sweep.get("ops")
    if not isinstance(ops, list):
        return None
    tests = [op for op in ops if isinstance(op, str) and op != "p2p_matrix"]
    hosts = hosts if isinstance(hosts, list) else []
    if all(isinstance(h, dict) for h in hosts):  # run.json's hosts: one record per rank
        hosts = sorted(hosts, key=lambda h: h.get("rank") if isinstance(h.get("rank"), int) else 0)
    names = [h.get("hostname") if isinstance(h, dict) else h for h in hosts]
    if sweep.get("pairs", True) and "sendrecv" in tests and len(names) > 1 and all(isinstance(n, str) for n in names):
        tests += [f"sendrecv_{name}" for name, pair in sweep_pairs(names).items() if pair is not None]
    return tests


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _fmt(v, spec: str, unit: str = "", none: str = "n/a") -> str:
    return none if _num(v) is None else f"{format(v, spec)}{unit}"


def _reason(line: dict, key: str, reason_key: str) -> str | None:
    """Why `key` is null on the line, where the run said (None when it is known or no reason is given)."""
    why = line.get(reason_key)
    return why if _num(line.get(key)) is None and isinstance(why, str) and why else None


def _gpu_power(s: dict) -> str:
    """The job's GPU power, or n/a with the run's reason."""
    text = _fmt(s[StepKey.JOB_GPU_POWER_W], ",.0f", " W")
    return f"{text} ({s['gpu_reason']})" if _num(s[StepKey.JOB_GPU_POWER_W]) is None and s.get("gpu_reason") else text


def _rank_gpu(r: dict, s: dict) -> str:
    """A rank's GPU power; n/a with its reason where that is not the header's already."""
    text = _fmt(r[StepKey.GPU_POWER_W], ".0f", " W")
    why = r.get("gpu_reason")
    return f"{text} ({why})" if _num(r[StepKey.GPU_POWER_W]) is None and why and why != s.get("gpu_reason") else text


def _eta(seconds) -> str:
    if seconds is None:
        return "n/a"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _verdict(found: dict) -> str:
    if found.get("verdict") is None:
        return f"not checked ({found.get('reason') or 'no cross-rank steps yet'})"
    if found["verdict"] == "none":
        return f"none in {found.get('steps_checked')} steps"
    return stragglers.describe(found["findings"][0]) if found.get("findings") else found["verdict"]


def _server_power(s: dict, sep: str) -> str:
    """Whole-server power (BMC) beside the GPUs', where the run records it."""
    w = s.get(StepKey.JOB_SERVER_POWER_W)
    return "" if _num(w) is None else f"{sep}server power {_fmt(w, ',.0f', ' W')}"


def plain_lines(s: dict) -> list[str]:
    """The view as plain lines (not a terminal, or --once into a pipe)."""
    total = f"/{s['max_steps']}" if s["max_steps"] is not None else ""
    if s.get("recorded") is False and s["step"] is None:  # nothing of the job yet: no steps, ranks or sweep to show
        return [f"{s['name']}: starting | no run.json yet: the job has not started writing here (a lab brings up its "
                "nodes and torchrun its ranks first)"]
    if s.get("sweep"):  # no steps: the sizes measured so far, from the table the sweep writes as it goes
        progress = s.get("sweep_progress") or {"tests": []}
        return [f"{s['name']}: {s['status']} | a collective sweep: {progress.get('sizes_done', 0)} sizes measured in "
                f"{len(progress['tests'])} tests; the whole table: python -m telemetry report RUN"
                + (" once it is done" if s["status"] in ("starting", "running") else "")] + (
            sweep_progress.lines(progress, s.get("sweep_ops"), s["status"] in ("running", "starting"))) + [f"  counters: {s['counters']}"] + (
            [f"  error: {s['error']}"] if s["error"] else [])
    head = (f"{s['name']}: {s['status']} | step {s['step'] if s['step'] is not None else '-'}{total} | "
            f"{_fmt(s['s_per_step'], '.3f', ' s/step', 's/step n/a')} | eta {_eta(s['eta_s'])} | "
            f"loss {_fmt(s['loss'], '.4f')} | {_fmt(s['tokens_per_s'], ',.0f', ' tok/s', 'tok/s n/a')} | "
            f"GPU power {_gpu_power(s)}"
            + _server_power(s, " | "))
    out = [head]
    for r in s["ranks"]:
        out.append(f"  rank {r['rank']}: step {r[StepKey.STEP]} | step time {_fmt(r['step_time_s'], '.3f', ' s')} | "
                   f"comm {_fmt(r['comm_share'] * 100 if r['comm_share'] is not None else None, '.1f', '%')} | "
                   f"GPU {_rank_gpu(r, s)}")
    if s["other_ranks"]:
        o = s["other_ranks"]
        out.append(f"  {o['ranks']} other ranks: median step time {_fmt(o['median_step_time_s'], '.3f', ' s')}")
    if s["slowest"]:
        out.append("  slowest: " + ", ".join(f"rank {r['rank']} ({r['step_time_s']:.3f} s)" for r in s["slowest"]))
    out.append(f"  straggler: {_verdict(s['straggler'])}")
    out.append(f"  counters: {s['counters']}")
    if s["coverage"]:
        out.append(f"  timing: {s['coverage']}")
    if s["error"]:
        out.append(f"  error: {s['error']}")
    return out


def rich_view(s: dict):
    """The view as a rich renderable (a terminal)."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    if s.get("sweep") or (s.get("recorded") is False and s["step"] is None):
        return Text("\n".join(plain_lines(s)))
    total = s["max_steps"] or 0
    done = s["step"] or 0
    title = Text.assemble((s["name"], "bold"), f"  {s['status']}  step {done}/{total or '?'}  ",
                          f"eta {_eta(s['eta_s'])}  {_fmt(s['s_per_step'], '.3f', ' s/step', 's/step n/a')}  "
                          f"loss {_fmt(s['loss'], '.4f')}  {_fmt(s['tokens_per_s'], ',.0f', ' tok/s', 'tok/s n/a')}  "
                          f"GPU power {_gpu_power(s)}{_server_power(s, '  ')}")
    table = Table(box=None, pad_edge=False)
    for col in ("rank", "step", "step time", "comm share", "GPU power"):
        table.add_column(col, justify="right")
    slow = {r["rank"] for r in s["slowest"][:1]} if len(s["ranks"]) > 1 else set()
    for r in s["ranks"]:
        table.add_row(str(r["rank"]), str(r[StepKey.STEP]), _fmt(r[StepKey.STEP_TIME_S], ".3f", " s"),
                      _fmt(r["comm_share"] * 100 if r["comm_share"] is not None else None, ".1f", "%"),
                      _rank_gpu(r, s), style="yellow" if r["rank"] in slow else None)
    if s["other_ranks"]:
        o = s["other_ranks"]
        table.add_row(f"{o['ranks']} others", "", _fmt(o["median_step_time_s"], ".3f", " s") + " (median)", "", "")
    parts = [title, ProgressBar(total=total or None, completed=done), table,
             Text(f"straggler: {_verdict(s['straggler'])}"), Text(f"counters: {s['counters']}")]
    if s["coverage"]:
        parts.append(Text(f"timing: {s['coverage']}"))
    if s["error"]:
        parts.append(Text(f"error: {s['error']}", style="red"))
    return Group(*parts)


def watch(run_dir: str, once: bool = False, interval_s: float = 2.0, out=None) -> int:
    """Follow `run_dir` until its run ends (or once); 0 when done, 130 on Ctrl-C."""
    out = out or sys.stdout
    tty = out.isatty()
    state = RunWatch(run_dir)
    try:
        state.poll()
        if once:
            if tty:
                from rich.console import Console
                Console(file=out).print(rich_view(state.snapshot()))
            else:
                print("\n".join(plain_lines(state.snapshot())), file=out, flush=True)
            return 0
        if tty:
            from rich.console import Console
            from rich.live import Live

            with Live(rich_view(state.snapshot()), console=Console(file=out), auto_refresh=False) as live:
                while state.running:
                    time.sleep(interval_s)
                    if state.poll():
                        live.update(rich_view(state.snapshot()), refresh=True)
            return 0
        shown = None
        while True:
            s = state.snapshot()
            # a sweep's whole progress, not its count of sizes: a test's footer and the latency table add none
            now = (s["step"], s["status"], s.get("sweep_progress"))
            if now != shown:  # a new step, a new status, or a sweep's new sizes, concluded test or latency
                shown = now
                print("\n".join(plain_lines(s)), file=out, flush=True)
            if not state.running:
                return 0
            time.sleep(interval_s)
            state.poll()
    except KeyboardInterrupt:
        return 130
