"""`python -m launch.torchrun [torchrun's arguments]`: torchrun, with a rendezvous that cannot complete said
in one `error:` line instead of a traceback.

What a restarted node (a Kubernetes pod restarted by its restartPolicy, a requeued Slurm node) meets depends
on the rendezvous. Under the static one (torchrun's default, and a PyTorchJob without elasticPolicy) its
workers connect to the old store and wait for peers that are blocked in a collective, until the process
group's timeout (`distributed.timeout_s`, 1,800 s in the 70B recipes). Under the c10d rendezvous the
survivors' agents see a node waiting (within --monitor-interval), stop their workers and a new round forms
with every node (the run resumes from its last checkpoint, train.resume=auto); if the others never come, the
join fails after `join_timeout` (--rdzv-conf join_timeout=S, torch's default 600 s). That failure is a
RendezvousError deep in torch's agent; this entry point turns it into one line naming the rendezvous, the
nodes it waited for and the timeout, exit code 1.

One setting is changed where more than one node may join (--nnodes above 1):
TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (unless set). With the agent's store shared with the workers (torch's
default since 2.4), a node that stayed rank 0 keeps the bootstrap address it published in the first round
and never publishes it in the next, so a restarted node waits for MASTER_ADDR in the new round's keys until
read_timeout and the rejoin fails (reproduced on torch 2.13 by tests/launch/test_torchrun.py;
dynamic_rendezvous.py rebuilds that info only for a first round or a new rank 0). Without sharing every
round publishes it again; the workers' own store is then a TCPStore on rank 0's free port, as before torch
2.4, and a TCPStore listens on every interface (the other nodes connect to it). One node has no node to
rejoin, so it keeps torch's shared store and its workers open no listener of their own.
"""
from __future__ import annotations

import os
import re
import signal
import sys

from launch import host_capacity
from telemetry.errors import output_dir_problem, print_errors, with_allowed

DEFAULT_JOIN_TIMEOUT_S = 600  # torch.distributed.elastic.rendezvous.dynamic_rendezvous: join_timeout
DEFAULT_RDZV_PORT = 29400  # torch.distributed.elastic.rendezvous.c10d_rendezvous_backend's default port
PORT_MAX = 65535
# --rdzv-conf keys torch reads as whole seconds (RendezvousParameters.get_as_int: a ValueError traceback otherwise)
RDZV_SECONDS = ("join_timeout", "last_call_timeout", "close_timeout", "read_timeout", "timeout")


def _describe(args) -> str:
    conf = dict(kv.split("=", 1) for kv in (args.rdzv_conf or "").split(",") if "=" in kv)
    where = args.rdzv_endpoint or f"{args.master_addr}:{args.master_port}"
    return (f"rendezvous {args.rdzv_backend} at {where} (id {args.rdzv_id}) for {args.nnodes} nodes, "
            f"join_timeout {conf.get('join_timeout', DEFAULT_JOIN_TIMEOUT_S)} s")


def _parse(argv: list[str]):
    """torchrun's own parser, whose mistakes (an unknown option, a value of the wrong type) are one `error:`
    line instead of argparse's usage block."""
    from torch.distributed.run import get_args_parser

    parser = get_args_parser()
    parser.error = lambda message: sys.exit(print_errors(f"{with_allowed(message, sys.argv[1:])}; see python -m launch.torchrun --help"))
    return parser.parse_args(argv)


def _rendezvous_problem(args) -> str | None:
    """Where the nodes meet, checked before any agent starts: a port out of range was a ValueError traceback
    from torch's rendezvous (or, for --master-port 0, every worker refusing MASTER_PORT 0 in a failure box),
    and a --node-rank beyond the static rendezvous's --nnodes waited forever for a node slot that never
    exists. None when fine."""
    from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

    if args.master_port is not None and not 1 <= args.master_port <= PORT_MAX:
        return (f"--master-port: got {args.master_port}; allowed: a TCP port from 1 to {PORT_MAX} (the workers' "
                "MASTER_PORT)")
    if args.rdzv_endpoint and re.fullmatch(r"[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f.]*(%\w+)?", args.rdzv_endpoint):
        # fe80::1:29400 is an IPv6 address alone or one with a port: torch takes the last group for the port
        return (f"--rdzv-endpoint: got {args.rdzv_endpoint!r}, an IPv6 address without brackets (where it ends and "
                "the port starts is ambiguous); allowed: [ADDRESS]:PORT, e.g. [fe80::1]:29400, or a host name")
    if not args.standalone and not args.rdzv_endpoint and not args.master_addr.strip():
        return (f"--master-addr: got {args.master_addr!r}; allowed: the host name or address of node rank 0, as "
                "every node gives it (torchrun's default 127.0.0.1 for one node)")
    if args.rdzv_endpoint:
        try:
            _, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=DEFAULT_RDZV_PORT)
        except ValueError:
            port = 0
        if not 1 <= port <= PORT_MAX:
            return (f"--rdzv-endpoint: got {args.rdzv_endpoint!r}; allowed: HOST or HOST:PORT, a port from 1 "
                    f"to {PORT_MAX} (e.g. node0:29400)")
    if not args.standalone and not str(args.rdzv_id).strip():  # torch refuses it only once the agent starts
        return (f"--rdzv-id: got {args.rdzv_id!r}; allowed: a non-empty id every node of the job gives alike "
                "(e.g. $SLURM_JOB_ID; torchrun's default is none)")
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    known = sorted(getattr(rendezvous_handler_registry, "_registry", None) or ("c10d", "etcd", "etcd-v2", "static"))
    if not args.standalone and args.rdzv_backend not in known:  # a ValueError traceback in the agent
        return f"--rdzv-backend: got {args.rdzv_backend!r}; allowed: {', '.join(known)}"
    for item in filter(None, (args.rdzv_conf or "").split(",")):
        key, _, value = item.partition("=")
        if key.strip() in RDZV_SECONDS and not (value.strip().isascii() and value.strip().isdigit()):
            return (f"--rdzv-conf: {key.strip()}={value.strip()!r}; allowed: a whole number of seconds "
                    f"(KEY=VALUE,... with {', '.join(RDZV_SECONDS)} in seconds)")
    top = int(args.nnodes.split(":")[-1])
    if args.standalone and top != 1:  # the standalone store is this node's alone: it waited for nodes never coming
        return (f"--standalone: one node, but --nnodes is {args.nnodes}; allowed: --standalone with --nnodes 1, or "
                "--rdzv-backend c10d --rdzv-endpoint HOST:PORT for several nodes")
    if args.standalone and args.node_rank != 0:  # torch ignores it: the job ran as node 0 of one
        return (f"--node-rank: got {args.node_rank} with --standalone (one node, rank 0); allowed: --node-rank 0 "
                "or none with --standalone, or --nnodes N with a rendezvous for several nodes")
    if args.rdzv_backend == "static" and not args.standalone and top >= 1 and not 0 <= args.node_rank < top:
        return (f"--node-rank: got {args.node_rank}; allowed: 0 to {top - 1} (one per node of --nnodes "
                f"{args.nnodes}; the static rendezvous waits for exactly those)")
    return None


def _agent_problem(args) -> str | None:
    """The agent's own settings torch takes as given: a --monitor-interval that is NaN (a ValueError traceback)
    or not above 0 (an AssertionError traceback), a --log-dir that is a file (NotADirectoryError), a negative
    --max-restarts (torch 2.8's check is a bare assert: its AssertionError has no message)."""
    import math

    if args.max_restarts < 0:
        return (f"--max-restarts: got {args.max_restarts}; allowed: a whole number >= 0 (torchrun: max_restarts "
                "must be >= 0), the times the agent restarts the workers after a failure")
    if not (math.isfinite(args.monitor_interval) and args.monitor_interval > 0):
        return (f"--monitor-interval: got {args.monitor_interval}; allowed: seconds above 0 (torch's default 0.1) "
                "between the agent's checks of its workers")
    if args.log_dir and os.path.exists(args.log_dir) and not os.path.isdir(args.log_dir):
        return f"--log-dir: {args.log_dir!r} is a file; allowed: a directory (made if missing)"
    if args.log_dir:  # one torch cannot make: a FileNotFoundError/PermissionError traceback from the agent
        return output_dir_problem(args.log_dir, "--log-dir")
    return None


def _launch_problem(args) -> str | None:
    """What torchrun would raise as a traceback (or leave to every worker to fail on), checked before any
    agent starts: the values torch's config_from_args refuses, and a training script or module that is not
    there. None when the launch can go ahead."""
    import importlib.util

    from torch.distributed.run import config_from_args
    from torch.distributed.run import logger as run_logger

    import re
    import shutil

    nodes = [int(n) for n in args.nnodes.split(":")] if re.fullmatch(r"[0-9]+(:[0-9]+)?", args.nnodes) else []
    if not nodes or min(nodes) < 1 or nodes[0] > nodes[-1]:  # 0 was torch's "min_nodes must be > 0" line
        return f"--nnodes: got {args.nnodes!r}; allowed: N or MIN:MAX, whole numbers of nodes >= 1 with MIN <= MAX"
    nproc = args.nproc_per_node
    if not (nproc.isascii() and nproc.isdigit() and int(nproc) >= 1) and nproc not in ("cpu", "gpu", "xpu", "auto"):
        return f"--nproc-per-node: got {nproc!r}; allowed: an integer >= 1, or cpu, gpu, xpu, auto"
    if nproc.isdigit() and (problem := host_capacity.workers_problem(
            "--nproc-per-node", nproc, int(nproc), host_capacity.available_bytes())):
        return problem
    if problem := _rendezvous_problem(args) or _agent_problem(args):
        return problem
    # torch's own checks (nnodes MIN:MAX, max_restarts, a device that is not there), run again by torchrun
    # itself: quiet here, and the environment it sets (OMP_NUM_THREADS) left for that run to set
    env, run_logger.disabled = dict(os.environ), True
    try:
        config_from_args(args)
    except (ValueError, AssertionError, RuntimeError) as exc:
        if nproc in ("gpu", "xpu") and "not available" in str(exc):  # torch says only "Cuda is not available."
            return (f"--nproc-per-node: got {nproc!r}, but {str(exc).rstrip('.')} here; allowed: an integer >= 1, "
                    "cpu or auto (one worker per device found, else per CPU)")
        # a bare assert in torch's checks has no message: name where it came from rather than print nothing
        return f"torchrun: {exc or f'{type(exc).__name__} in torch.distributed.run.config_from_args'}"
    finally:
        run_logger.disabled = False
        os.environ.clear()
        os.environ.update(env)
    script = args.training_script
    if args.module:
        try:
            found = importlib.util.find_spec(script) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return f"-m {script}: no such module on this node's sys.path; allowed: an importable module (e.g. trainer)"
    elif args.no_python and shutil.which(script) is None:
        return f"--no-python: {script!r} is not a command on PATH; allowed: an executable the workers can run"
    elif not args.no_python and not os.path.isfile(script):
        return f"training script: {script!r} is not a file; allowed: a Python file, or -m MODULE"
    return None


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.rendezvous.api import (RendezvousClosedError, RendezvousConnectionError,
                                                          RendezvousError, RendezvousTimeoutError)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_rdzv_endpoint, parse_min_max_nnodes
    from torch.distributed.run import main as torchrun_main

    argv = sys.argv[1:] if argv is None else argv
    args = _parse(argv)  # as torchrun parses them (PET_* variables included, as the training operator sets)
    if problem := _launch_problem(args):
        return print_errors(problem)
    if args.module and args.training_script == "trainer":  # the recipe's mistakes, before any worker starts
        from trainer.cli import recipe_problems

        if problems := recipe_problems(args.training_script_args):
            return print_errors(*problems)
    if parse_min_max_nnodes(args.nnodes)[1] > 1:
        os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")  # a restarted node can rejoin (docstring)
    if not args.standalone:  # one job's every round, for its workers (trainer/runlock.py): MASTER_PORT is not
        where = get_rdzv_endpoint(args)
        os.environ["FABRIC_HARNESS_RDZV"] = f"{args.rdzv_backend} {where} {args.rdzv_id}"
    try:
        torchrun_main(argv)
    except ChildFailedError as exc:
        codes = {failure.exitcode for failure in exc.failures.values()}
        # bad input: the workers said it (one `error:` line, the first rank to find it); torch's box adds
        # nothing. A rank that found it alone exits 2 and the agent SIGTERMs the others: those end by the
        # signal (a negative code), and the launch still exits 2 without torch's traceback.
        if 2 in codes and all(code == 2 or code < 0 for code in codes):
            return 2
        raise
    except RendezvousTimeoutError:
        print_errors(f"{_describe(args)}: not every node joined in time; a restarted node rejoins only while "
                     "the other nodes' agents run (check every node or pod is up), else the job ends here")
        return 1
    except RendezvousClosedError:
        print_errors(f"{_describe(args)}: the rendezvous was closed (the job finished or gave up, its restarts "
                     "used up); a node that arrives now cannot join it")
        return 1
    except RendezvousConnectionError as exc:
        print_errors(f"{_describe(args)}: cannot reach the rendezvous store ({exc or 'connection failed'}); "
                     "the node hosting it (is_host, the first node or the Master pod) is down or unreachable")
        return 1
    except RendezvousError as exc:
        print_errors(f"{_describe(args)}: {type(exc).__name__}: {exc}")
        return 1
    except SignalException as exc:  # scancel, preemption, a pod deleted: torch's traceback said only this
        name = signal.Signals(exc.sigval).name
        print(f"torchrun: stopped by {name}; its workers were sent {name} and have ended (a training run saves "
              "its step first, train.save_on_signal)", file=sys.stderr)
        return 128 + exc.sigval
    return 0


if __name__ == "__main__":
    sys.exit(main())
