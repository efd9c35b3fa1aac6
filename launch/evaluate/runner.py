"""The evaluation matrix: plan (interleaved rounds), resume, launch, transport check, summary.

Round r runs every workload once on every variant; within a workload the variants' order is rotated by r,
so a slow drift of the host (thermal, a neighbour's job) falls on every variant in turn instead of always
on the last one. A run directory whose run.json says completed or target_reached is kept, never rerun.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable

from launch.lab import pump
from launch.lab_leftovers import STOP_WITH

from .spec import Evaluation, Variant, Workload
from telemetry.errors import InputError, output_dir_problem
from telemetry.rundir import RUN_JSON

COMPLETE = ("completed", "target_reached")
# Exit codes: 0 all good; 1 a run or the report failed; 2 bad input; 3 a variant used another transport
EXIT_FAILED, EXIT_INPUT, EXIT_MISMATCH, EXIT_INTERRUPTED = 1, 2, 3, 130


class EvaluateError(InputError):
    """Bad input found while preparing (a missing tool, a run directory from another setting); one line."""


@dataclass
class PlannedRun:
    index: int  # 1-based position in the whole matrix
    round: int  # 1-based
    variant: Variant
    workload: Workload
    repeat: int  # 1-based (equals the round)
    dir: str


def plan(ev: Evaluation) -> list[PlannedRun]:
    runs = []
    n = len(ev.variants)
    for r in range(ev.repeats):
        order = [ev.variants[(i + r) % n] for i in range(n)]
        for w in ev.workloads:
            for v in order:
                runs.append(PlannedRun(len(runs) + 1, r + 1, v, w, r + 1,
                                       os.path.join(ev.out, "runs", w.name, v.name, f"r{r + 1}")))
    return runs


def setting(ev: Evaluation, run: PlannedRun) -> dict:
    """What decides a run's result (its transport claim and timeout do not): a kept run must match it."""
    from telemetry.capture.environment import is_secret, redact_tree
    opts = {k: v for k, v in ev.options.items() if k != "timeout"}
    env = {k: ("<redacted>" if is_secret(k, v) else v) for k, v in sorted(run.variant.env.items())}
    return {"launcher": ev.launcher, "options": opts, "env": env, "lab": run.variant.lab, "hosts": run.variant.hosts,
            "recipe": run.workload.recipe, "overrides": redact_tree(list(run.workload.overrides))}


def read_run_field(run_dir: str, key: str):
    """One field of the run's run.json; None when it is missing or unreadable."""
    try:
        with open(os.path.join(run_dir, RUN_JSON), encoding="utf-8") as f:
            return json.load(f).get(key)
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def read_status(run_dir: str) -> str | None:
    return read_run_field(run_dir, "status")


def _held(run_dir: str) -> str | None:
    """The one line when a live run still holds `run_dir` (its run.lock: a trainer on this host or a lab node)."""
    from launch.lab import MAX_NODES, node_name
    from trainer.runlock import RunLock

    if not os.path.isdir(run_dir):
        return None
    return RunLock(run_dir, rank=1).in_use(tuple(node_name(i) for i in range(MAX_NODES)))


def resume_state(ev: Evaluation, runs: list[PlannedRun]) -> dict[int, str]:
    """run index -> 'keep' (complete, same setting) or 'run'; EvaluateError lists kept runs whose setting
    changed (their numbers would be reported under a setting they were not measured with)."""
    actions, problems = {}, []
    for parent in dict.fromkeys(os.path.dirname(run.dir) for run in runs):  # a file where runs/W/V goes
        if problem := output_dir_problem(parent, "out"):
            raise EvaluateError(problem + f" (under `out` {ev.out!r} the runner keeps runs/WORKLOAD/VARIANT/rN; "
                                "give another `out` or remove what is in the way)")
    if (other := _recorded_name(ev.out)) is not None and other != ev.name:  # its summary would be replaced
        raise EvaluateError(f"out: {ev.out!r} holds the evaluation {other!r} (its evaluation.json); this one is "
                            f"{ev.name!r}; allowed: another `out`, or the name of the evaluation recorded there")
    for run in runs:
        if read_status(run.dir) not in COMPLETE:
            if live := _held(run.dir):  # it would be moved aside as "an incomplete earlier attempt" while it runs
                head, _, allowed = live.removeprefix("output_dir: ").partition("; allowed: ")
                problems.append(f"out: {head} (an evaluation stopped with kill -9 leaves its lab running); allowed: "
                                + allowed.replace("another output_dir", "another `out`"))
            actions[run.index] = "run"
            continue
        try:
            with open(os.path.join(run.dir, "evaluate.json"), encoding="utf-8") as f:
                recorded = json.load(f).get("setting")
        except (OSError, json.JSONDecodeError):
            recorded = None
        now = json.loads(json.dumps(setting(ev, run)))
        if recorded != now:
            what = "was not made by launch.evaluate" if recorded is None else "was measured with another setting (" \
                + "; ".join(f"{k}: {recorded.get(k)!r} -> {now[k]!r}" for k in now if recorded.get(k) != now[k]) + ")"
            problems.append(f"{run.dir}: a completed run that {what}; give another `out` or remove that directory")
        actions[run.index] = "keep"
    if problems:
        raise EvaluateError(" | ".join(problems[:3]) + (f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""))
    return actions


def _recorded_name(out: str) -> str | None:
    """The name in out/evaluation.json, or None (none there, or not readable: rewritten from the runs)."""
    try:
        with open(os.path.join(out, "evaluation.json"), encoding="utf-8") as f:
            name = json.load(f).get("name")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) else None


def set_aside(run_dir: str) -> str | None:
    """An incomplete earlier attempt is moved to DIR.attempt-N (kept for its logs), so the rerun starts clean."""
    if not os.path.exists(run_dir):
        return None
    n = 1
    while os.path.exists(f"{run_dir}.attempt-{n}"):
        n += 1
    os.rename(run_dir, f"{run_dir}.attempt-{n}")
    return f"{run_dir}.attempt-{n}"


# ---------------------------------------------------------------- launchers

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainer_args(run: PlannedRun) -> list[str]:
    config = [f"fabric.config.{k}={str(v).lower() if isinstance(v, bool) else v}"
              for k, v in run.variant.fabric_config.items()]
    return [run.workload.recipe, *run.workload.overrides, *config, f"output_dir={run.dir}"]


def local_command(ev: Evaluation, run: PlannedRun) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={ev.options['nproc_per_node']}", "--max-restarts=0", "-m", "trainer",
            *trainer_args(run)]


def lab_command(ev: Evaluation, run: PlannedRun) -> list[str]:
    lab = run.variant.lab
    cmd = [sys.executable, "-m", "launch.lab", "--nodes", str(lab.get("nodes", ev.options["nodes"])),
           "--nproc-per-node", str(lab.get("nproc_per_node", ev.options["nproc_per_node"])), "--rate", lab.get("rate", "none"),
           "--timeout", str(ev.options["timeout"]), "--port", str(free_port())]
    if "mtu" in lab:
        cmd += ["--mtu", str(lab["mtu"])]
    if "slow_node" in lab:
        cmd += ["--slow-node", str(lab["slow_node"]), "--slow-rate", lab["slow_rate"]]
    for key in ("burst", "limit"):
        if key in lab:
            cmd += [f"--{key}", lab[key]]
    return [*cmd, "--", *trainer_args(run)]


# Run on every node of a Slurm step (as launch/slurm/train.sbatch's task body, for a step of an allocation):
# the step's first node hosts the rendezvous at the address slurmd reaches it at.
SLURM_STEP_BODY = r'''set -euo pipefail
HOSTS=$(scontrol show hostnames "$SLURM_STEP_NODELIST")
HEAD=${HOSTS%%$'\n'*}  # no `| head`: under pipefail scontrol's SIGPIPE (exit 141) would end the step
HEAD_ADDR=$(scontrol show node "$HEAD" | grep -o 'NodeAddr=[^ ]*' | head -n 1 | cut -d= -f2 || true)
ADDR=${HEAD_ADDR:-$HEAD}
[[ $ADDR == *:* && $ADDR != \[* ]] && ADDR="[$ADDR]"  # IPv6: torchrun tells address from port by the brackets
if [[ -z "${GLOO_SOCKET_IFNAME:-}" && -n "${NCCL_SOCKET_IFNAME:-}" && -e "/sys/class/net/${NCCL_SOCKET_IFNAME}" ]]; then
  export GLOO_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME
fi
LOCAL=()
if [[ $ADDR =~ ^[0-9.]+$ ]] && command -v ip >/dev/null; then
  SRC=$(ip route get "$ADDR" 2>/dev/null | grep -o "src [^ ]*" | head -n 1 | cut -d" " -f2 || true)
  [[ -n $SRC ]] && LOCAL=(--local-addr "$SRC")
fi
exec python -m launch.torchrun --nnodes "$SLURM_STEP_NUM_NODES" --nproc-per-node "$FH_NPROC" --max-restarts 0 \
  --rdzv-id "$SLURM_JOB_ID-$SLURM_STEP_ID" --rdzv-backend c10d --rdzv-endpoint "$ADDR:$FH_RDZV_PORT" \
  --rdzv-conf "is_host=$(( SLURM_NODEID == 0 ))" ${LOCAL[@]+"${LOCAL[@]}"} -m trainer "$@"
'''


def slurm_nproc(ev: Evaluation) -> int:
    o = ev.options
    return o["nproc_per_node"] or o["gpus_per_node"] or 1


def slurm_command(ev: Evaluation, run: PlannedRun, job_id: str) -> list[str]:
    o = ev.options
    nodes = len(run.variant.hosts) if run.variant.hosts else o["nodes"]
    cmd = ["srun", f"--jobid={job_id}", f"--nodes={nodes}", "--ntasks-per-node=1", "--whole",
           "--kill-on-bad-exit=1", f"--time={max(1, int(o['timeout'] // 60) + 1)}"]
    if run.variant.hosts:
        cmd.append(f"--nodelist={','.join(run.variant.hosts)}")
    if o["gpus_per_node"] is not None:
        cmd.append(f"--gpus-per-node={o['gpus_per_node']}")
    return [*cmd, *o["srun_args"], "bash", "-c", SLURM_STEP_BODY, "fabric-harness", *trainer_args(run)]


class SlurmAllocation:
    """One allocation for the whole evaluation: the one the runner is inside (SLURM_JOB_ID, e.g. under salloc
    or sbatch), else one made with `salloc --no-shell` and cancelled at the end, whatever happens."""

    def __init__(self, ev: Evaluation, say: Callable[[str], None]):
        self.ev, self.say = ev, say
        self.job_id: str | None = None
        self.owned = False

    def __enter__(self) -> "SlurmAllocation":
        if os.environ.get("SLURM_JOB_ID"):
            self.job_id = os.environ["SLURM_JOB_ID"]
            self.say(f"using the current Slurm allocation, job {self.job_id}")
            return self
        o = self.ev.options
        hosts = sorted({h for v in self.ev.variants for h in v.hosts})
        nodes = max([o["nodes"], len(hosts)] + [len(v.hosts) for v in self.ev.variants])
        cmd = ["salloc", "--no-shell", f"--nodes={nodes}", f"--job-name=fh-eval-{self.ev.name}", "--exclusive"]
        if hosts:
            cmd.append(f"--nodelist={','.join(hosts)}")
        if o["partition"]:
            cmd.append(f"--partition={o['partition']}")
        if o["gpus_per_node"] is not None:
            cmd.append(f"--gpus-per-node={o['gpus_per_node']}")
        self.say(f"requesting one Slurm allocation: {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        m = re.search(r"Granted job allocation (\d+)", proc.stderr + proc.stdout)
        if proc.returncode != 0 or not m:
            text = " ".join((proc.stderr or proc.stdout).split())[-400:]
            raise EvaluateError(f"slurm: salloc failed (exit {proc.returncode}): {text}")
        self.job_id, self.owned = m.group(1), True
        self.say(f"allocation granted: job {self.job_id}")
        return self

    def __exit__(self, *exc) -> bool:
        if self.owned and self.job_id:
            subprocess.run(["scancel", self.job_id], capture_output=True, text=True, timeout=60)
            self.say(f"allocation {self.job_id} released (scancel)")
        return False


def check_launcher(ev: Evaluation) -> None:
    import shutil
    if ev.launcher == "lab":
        from launch.lab import LabError, check_host
        try:
            check_host()
        except LabError as exc:
            raise EvaluateError(f"launcher lab: {exc}") from None
    elif ev.launcher == "slurm":
        missing = [t for t in ("srun", "scontrol", "scancel") + (() if os.environ.get("SLURM_JOB_ID") else ("salloc",))
                   if shutil.which(t) is None]
        if missing:
            raise EvaluateError(f"launcher slurm: {', '.join(missing)} not found on PATH (the Slurm client commands); "
                                "allowed: run it where they are (a Slurm login node, or inside salloc/sbatch), or "
                                "launcher local or lab")


# ---------------------------------------------------------------- running one

def execute(cmd: list[str], env: dict, log_path: str, timeout_s: float, verbose: bool) -> tuple[int, bool]:
    """Run one launcher command in its own session, output to log_path (and stdout if verbose); returns
    (exit code, timed out). On timeout the launcher gets SIGTERM (the lab tears down on it), then SIGKILL."""
    from telemetry.capture.environment import redact_text
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(f"$ {redact_text(' '.join(cmd))}\n")  # an override may carry a token
        log.flush()
        proc = subprocess.Popen(cmd, env={**env, STOP_WITH: str(os.getpid())}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        t = threading.Thread(target=pump, args=(proc.stdout, [log] + ([sys.stdout] if verbose else [])), daemon=True)
        t.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C: stop the launcher (and its teardown) before going
            stop(proc)
            raise
        if timed_out:
            stop(proc)
        t.join(timeout=10)
    return proc.returncode, timed_out


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""
