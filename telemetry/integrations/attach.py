"""`python -m telemetry.integrations.attach --run-dir DIR [--expect FABRIC] -- COMMAND ...`: run an unmodified
Lightning/NeMo job (a NeMo recipe script, `nemo llm finetune ...`, torchrun ...) with our telemetry.

Every Python process the command starts installs the collective tracer before its own imports (a
sitecustomize put first on PYTHONPATH), and Lightning adds telemetry.integrations.lightning.TelemetryCallback to
each Trainer through its `lightning.pytorch.callbacks_factory` entry point (this package's metadata:
fabric-harness must be pip-installed where the job runs). The command's exit code is returned.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys

from telemetry.capture import fabric
from telemetry.errors import OneLineParser, output_dir_problem, print_errors

RUN_DIR_ENV = "FABRIC_HARNESS_RUN_DIR"  # set: Lightning's entry point adds our callback (telemetry/integrations/lightning.py)
EXPECT_ENV = "FABRIC_HARNESS_FABRIC_EXPECT"  # any, roce, infiniband, tcp, intra-node
RECIPE_ENV = "FABRIC_HARNESS_RECIPE_JSON"  # launch.nemo: the harness recipe and layout this job translates

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_attach_site")
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Parser(OneLineParser):  # its own error line; no abbreviated options (OneLineParser)
    def error(self, message):
        print_errors(f"{self.explained(message)}; see python -m telemetry.integrations.attach --help")
        sys.exit(2)


def attach_environment(run_dir: str, expect: str = "any", environ=os.environ) -> dict:
    """The environment a job needs to carry our telemetry (a copy of `environ`, changed)."""
    env = dict(environ)
    env[RUN_DIR_ENV] = os.path.abspath(run_dir)
    env[EXPECT_ENV] = expect
    paths = [SITE_DIR, PACKAGE_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="python -m telemetry.integrations.attach",
                description="Run a Lightning/NeMo command with the harness's telemetry attached.",
                epilog="example: python -m telemetry.integrations.attach --run-dir runs/nemo -- "
                       "torchrun --nproc-per-node 8 finetune.py")
    p.add_argument("--run-dir", required=True, help="the run directory to write (run.json, metrics.jsonl, ...)")
    p.add_argument("--expect", default="any", choices=fabric.EXPECTATIONS,
                   help="the fabric the job must use; a mismatch is a loud warning and a flag in run.json")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command given after --")
    if problem := output_dir_problem(args.run_dir, "--run-dir"):  # before the job runs, not after it trained
        return print_errors(problem)
    env = attach_environment(args.run_dir, args.expect)
    try:
        return run_job(command, env)
    except FileNotFoundError:
        print_errors(f"command: {command[0]!r} not found; allowed: a program on PATH or a path to an executable, "
                     "after --")
        return 2
    except OSError as exc:  # found but not runnable: no executable bit, a directory, a binary of another machine
        return print_errors(f"command: {command[0]!r} cannot be run ({exc.strerror or exc}); allowed: a program on "
                            "PATH or a path to an executable (chmod +x, or name its interpreter: bash ./x.sh)")


def run_job(command: list[str], env: dict) -> int:
    """Run the job until it ends, whatever signal comes meanwhile, and return its exit code (128 + the signal
    that ended it). The job records its own end (run.json) when stopped: SIGTERM (a scheduler stopping what it
    started, attach) is passed on to it; SIGINT (Ctrl-C) reached it from the terminal already. attach waits
    either way, and never kills it midway through that record."""
    job = subprocess.Popen(command, env=env)

    def pass_on(signum, _frame):
        if signum != signal.SIGINT:  # the terminal sends Ctrl-C to the whole foreground group, the job too
            with contextlib.suppress(ProcessLookupError):
                job.send_signal(signum)

    previous = {s: signal.signal(s, pass_on) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = job.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
