"""`python -m launch.evaluate EVAL.yaml`: a fabric evaluation from one command.

Runs a matrix of fabric variants x workloads x repeats (interleaved rounds), keeps runs already complete,
checks that each variant used the transport it claims, and renders one report (docs/evaluate.md).
"""
from __future__ import annotations

import json
import os
import signal
import time
from contextlib import nullcontext
from typing import Callable

from .runner import (COMPLETE, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED, EXIT_MISMATCH, EvaluateError,
                     SlurmAllocation, check_launcher, execute, lab_command, local_command, plan,
                     read_run_field, read_status, resume_state, set_aside, setting, slurm_command, slurm_nproc, tail)
from .spec import Evaluation
from telemetry.analysis.transport_claims import check_transport
from telemetry.errors import print_errors
from telemetry.work_progress import WorkProgress

Launch = Callable[[list, dict, str, float, bool], tuple]


def _fabric(run_dir: str) -> dict | None:
    return read_run_field(run_dir, "fabric")


def _launch_one(ev: Evaluation, run, alloc, launch: Launch, verbose: bool, say) -> dict:
    """Start one run of the matrix in its own directory (an incomplete earlier attempt set aside first) and
    wait for it; returns its exit code, duration and whether it timed out."""
    aside = set_aside(run.dir)
    if aside:
        say(f"  an incomplete earlier attempt was moved to {aside}")
    os.makedirs(run.dir)
    with open(os.path.join(run.dir, "evaluate.json"), "w", encoding="utf-8") as f:
        json.dump({"evaluation": ev.name, "variant": run.variant.name, "workload": run.workload.name,
                   "repeat": run.repeat, "expect_transport": run.variant.expect_transport,
                   "setting": setting(ev, run)}, f, indent=1)
    env = {**os.environ, **run.variant.env, "PYTHONUNBUFFERED": "1"}
    if ev.launcher == "local":
        cmd = local_command(ev, run)
    elif ev.launcher == "lab":
        cmd = lab_command(ev, run)
    else:
        from .runner import free_port
        cmd = slurm_command(ev, run, alloc.job_id if alloc else "JOB")
        env.update(FH_NPROC=str(slurm_nproc(ev)), FH_RDZV_PORT=str(free_port()))
    log = os.path.join(run.dir, "launch.log")
    started = time.monotonic()
    code, timed_out = launch(cmd, env, log, ev.options["timeout"] + 120, verbose)
    if ev.launcher == "lab":  # the lab stops its nodes at `timeout` itself and says so with timeout(1)'s 124
        from launch.lab import TIMED_OUT
        timed_out = timed_out or code == TIMED_OUT
    return {"exit_code": code, "duration_s": round(time.monotonic() - started, 3), "timed_out": timed_out}


def _assess(run, result: dict) -> None:
    """The run's status from its run.json and, when complete, its transport check and metric."""
    from telemetry.analysis.evaluation_stats import run_metric

    result["status"] = read_status(run.dir)
    if result["status"] in COMPLETE:
        result["check"] = check_transport(run.variant.expect_transport, _fabric(run.dir))
        result["metric"] = run_metric(run.dir, run.workload.sweep)


def _judge(run, result: dict, say) -> None:
    """_assess, said; a failure shows the launch log's last lines."""
    _assess(run, result)
    if result["status"] in COMPLETE:
        c = result["check"]
        used = f"{c['detected']}" + (f" over {', '.join(c['interfaces'])}" if c["interfaces"] else "")
        note = {"ok": "ok", "mismatch": "TRANSPORT MISMATCH", "unknown": "not verified"}[c["verdict"]]
        if result["action"] == "run":
            say(f"  {result['status']} in {result['duration_s']:.1f} s; transport {used} (expected "
                f"{c['expected']}): {note}" + (f": {c['reason']}" if c.get("reason") else ""))
        elif c["verdict"] != "ok":
            say(f"  transport {used} (expected {c['expected']}): {note}: {c['reason']}")
    else:
        why = "timed out" if result.get("timed_out") else f"exit {result['exit_code']}"
        say(f"  FAILED ({why}, run.json status {result['status'] or 'missing'}); last lines of "
            f"{os.path.join(run.dir, 'launch.log')}:")
        for line in tail(os.path.join(run.dir, "launch.log")).splitlines():
            print(f"    {line}", flush=True)


def run_evaluation(ev: Evaluation, verbose: bool = False, dry_run: bool = False, launch: Launch | None = None,
                   render: bool = True) -> int:
    """Run what is missing of the matrix, then the summary; returns the exit code. `launch` replaces the real
    launcher (tests); `render` False skips the compare reports."""
    from . import summary

    def say(msg: str) -> None:
        print(f"[evaluate] {msg}", flush=True)

    runs = plan(ev)
    actions = resume_state(ev, runs)
    kept = sum(1 for a in actions.values() if a == "keep")
    say(f"{ev.name}: {len(ev.variants)} variants x {len(ev.workloads)} workloads x {ev.repeats} repeats = "
        f"{len(runs)} runs, launcher {ev.launcher}; {kept} kept from an earlier invocation; output {ev.out}")
    if dry_run:
        for run in runs:
            what = "keep" if actions[run.index] == "keep" else "run "
            say(f"  {what} round {run.round}/{ev.repeats}: variant {run.variant.name} x workload {run.workload.name} "
                f"(run {run.index}/{len(runs)}) -> {run.dir}")
        return 0
    if launch is None and kept < len(runs):
        check_launcher(ev)
    launch = launch or execute
    os.makedirs(ev.out, exist_ok=True)
    from telemetry.capture.environment import is_secret
    record = {"name": ev.name, "file": os.path.abspath(ev.path) if ev.path else None, "launcher": ev.launcher,
              "repeats": ev.repeats, "out": ev.out, "options": ev.options, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "env": {v.name: {k: ("<redacted>" if is_secret(k, val) else val) for k, val in v.env.items()}
                      for v in ev.variants},
              "variants": [{"name": v.name, "expect_transport": v.expect_transport, "lab": v.lab, "hosts": v.hosts}
                           for v in ev.variants],
              "workloads": [{"name": w.name, "recipe": w.recipe, "overrides": w.overrides, "sweep": w.sweep}
                            for w in ev.workloads],
              "runs": []}
    results = record["runs"]
    interrupted = False
    need_alloc = ev.launcher == "slurm" and kept < len(runs) and launch is execute
    stopped_by: list[int] = []

    def terminate(signum, _frame):  # SIGTERM (scancel, kill) ends like Ctrl-C: the run stopped, a record written
        stopped_by.append(signum)
        raise KeyboardInterrupt

    old_term = signal.signal(signal.SIGTERM, terminate)
    current = None
    progress = WorkProgress("evaluate", len(runs) - kept, "runs").start()  # kept runs take no time: not in the ETA
    try:
        with (SlurmAllocation(ev, say) if need_alloc else nullcontext()) as alloc:
            for run in runs:
                where = (f"round {run.round}/{ev.repeats}: variant {run.variant.name} x workload {run.workload.name} "
                         f"(run {run.index}/{len(runs)})")
                result = {"index": run.index, "round": run.round, "variant": run.variant.name,
                          "workload": run.workload.name, "repeat": run.repeat, "dir": run.dir,
                          "action": actions[run.index], "exit_code": None, "duration_s": None}
                if actions[run.index] == "keep":
                    say(f"{where}: kept (completed earlier)")
                else:
                    say(f"{where} ...")
                    current = (run, result)  # recorded as interrupted if a signal stops it
                    result.update(_launch_one(ev, run, alloc, launch, verbose, say))
                _judge(run, result, say)
                results.append(result)
                current = None
                summary.write_record(ev, record)
                if result["action"] == "run":
                    progress.advance(note=f"{run.variant.name} x {run.workload.name}: {result['status'] or 'failed'}")
    except KeyboardInterrupt:
        interrupted = True
        if current is not None and current[1] not in results:  # its directory keeps what it wrote: say where
            run, result = current
            result["interrupted"] = True
            _assess(run, result)  # complete where it ended just before the signal came
            result["status"] = result["status"] if result["status"] in COMPLETE else "interrupted"
            results.append(result)
        say("interrupted; the runs so far are kept (run the same command again to continue)")
    finally:
        progress.close()
        signal.signal(signal.SIGTERM, old_term)
    record["failed"] = [r for r in results if r["status"] not in COMPLETE]
    record["verdicts"] = summary.variant_verdicts(ev, results)
    record["statistics"] = summary.statistics(ev, results)
    record["reports"] = summary.compare_reports(ev, results, say) if render and not interrupted else []
    mismatch = [n for n, v in record["verdicts"].items() if v["verdict"] == "mismatch"]
    # as a shell reports a process ended by a signal: 130 for Ctrl-C (SIGINT), 143 for SIGTERM
    interrupted_code = 128 + stopped_by[0] if stopped_by else EXIT_INTERRUPTED
    code = (interrupted_code if interrupted else EXIT_MISMATCH if mismatch
            else EXIT_FAILED if record["failed"] or any(r["error"] for r in record["reports"]) else 0)
    record.update(mismatched_variants=mismatch, exit_code=code, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    summary.write_record(ev, record)
    summary.write_pages(ev, record)
    print(flush=True)
    print(summary.final_table(ev, record), flush=True)
    print(flush=True)
    for cls, text in summary.banners(record):
        if cls != "good":
            print(f"[evaluate] {'WARNING' if cls == 'unsure' else 'ERROR'}: {text}", flush=True)
    say(f"report: {os.path.join(ev.out, 'evaluation.html')} (and evaluation.md, evaluation.json)")
    if mismatch:
        say(f"exit {EXIT_MISMATCH}: variant(s) {', '.join(mismatch)} did not use the transport they claim")
    return code


def main(argv: list[str] | None = None) -> int:
    from telemetry.errors import OneLineParser, output_dir_problem

    from .spec import SpecError, load_evaluation
    p = OneLineParser(prog="python -m launch.evaluate",
                                description="Run fabric variants x workloads x repeats and render one comparison.")
    p.add_argument("evaluation", help="the evaluation file (YAML; docs/evaluate.md)")
    p.add_argument("--dry-run", action="store_true", help="check the file and print the plan (what runs, what is kept)")
    p.add_argument("--out", default=None, help="output directory (default: the file's `out`)")
    p.add_argument("--verbose", "-v", action="store_true", help="show each run's output (always kept in its launch.log)")
    args = p.parse_args(argv)
    try:
        ev = load_evaluation(args.evaluation)
    except SpecError as exc:
        for problem in exc.problems:
            print_errors(problem)
        return EXIT_INPUT
    if args.out is not None and not args.out.strip():  # '' (an unset $VAR) is not "the file's out"
        return print_errors(f"--out: got {args.out!r}; allowed: a non-empty directory path, or no --out for the "
                            "file's `out`")
    if args.out:
        ev.out = os.path.abspath(os.path.expanduser(args.out))
    if problem := output_dir_problem(ev.out, "--out" if args.out else "out"):
        print_errors(problem)
        return EXIT_INPUT
    lock = None
    if not args.dry_run:  # one evaluation at a time in an output directory
        from trainer.runlock import RunLock
        os.makedirs(ev.out, exist_ok=True)
        lock = RunLock(ev.out, 0)
        if problem := lock.acquire():
            # two at once each moved the other's live run aside as "an incomplete earlier attempt" and wrote
            # evaluation.json over the other's (one said completed, the other failed)
            key = "--out" if args.out else "out"
            print_errors(problem.replace("output_dir:", f"{key}:", 1).replace("a live run", "a live evaluation", 1)
                         .replace("another output_dir", f"another {key}"))
            return EXIT_INPUT
    try:
        return run_evaluation(ev, verbose=args.verbose, dry_run=args.dry_run)
    except EvaluateError as exc:
        print_errors(exc)
        return EXIT_INPUT
    finally:
        if lock is not None:
            lock.release()
