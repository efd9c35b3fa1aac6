"""The fabric lab: N emulated nodes on one Linux host, joined by shaped links, running any recipe.

    python -m launch.lab --nodes 2 --nproc-per-node 1 --rate 1gbit -- recipes/tiny_llama_lora.yaml max_steps=20

Each node is a network namespace with one interface `fab0`. Two nodes are joined by a veth pair; more
go through a bridge in a namespace of their own (a switch). Every link is shaped with `tc ... tbf` at
RATE in both directions (the node's egress and the switch port's egress), with a burst sized for the
rate (docs/reference.md section 8: >= 128 KiB at 1 Gbit/s, >= 16 KiB at 100 Mbit/s, or the link
underperforms). `--slow-node I --slow-rate R` shapes node I's own egress (its end of its veth, one
direction only) at R instead: one slow link among healthy ones, for the straggler report. `--mtu` sets
the links' frame size (1500 by default; 9000 for jumbo frames, as training fabrics run). netem is not used (bandwidth only, no added delay). Addresses exist on
namespaces the lab creates; traffic between ranks of one node goes over loopback and is never shaped.

One torchrun agent per node joins a c10d rendezvous on node 0 (`is_host=1` there, 0 elsewhere: host
names all resolve to loopback here), with GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME set to `fab0`
(otherwise gloo advertises 127.0.0.1 and hangs). Whatever happens - success, failure, Ctrl-C, SIGTERM or
SIGHUP, --timeout, a hung agent - the namespaces are deleted before the command returns. Only SIGKILL skips
that: each namespace carries its lab's mark, and the next lab removes what a gone lab left (docs/lab.md).
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone

from launch import host_capacity, lab_leftovers, lab_options
from launch.lab_leftovers import leftover_of_a_gone_lab, owner_mark
from launch.console import pump, say
from telemetry.analysis import rates
from telemetry.analysis.fabric_summary import lab_burst_bytes, lab_links
from telemetry.errors import HarnessError, OneLineParser, output_dir_problem, print_errors
from telemetry.rundir import LAB, LOGS, METRICS, RUN_JSON, RunKey, StepKey
from telemetry.signals import deferred

SUBNET_BASE = "10.213"  # only ever assigned inside the lab's own namespaces
IFACE = "fab0"
# tbf counts whole frames: with 1500-byte frames the headers (and the ACKs of the other direction) take
# 4-6% of a shaped link, so bidirectional payload tops out near 93%; 9000-byte frames leave about 1%
DEFAULT_MTU, MAX_MTU = 1500, 65535
MIN_MTU = lab_options.MIN_MTU  # 576
MIN_NODES, MAX_NODES = 2, 200
MIN_RATE_BPS = 8  # tc shapes in whole bytes per second: a slower rate is 0, which tc refuses
ID_PREFIX = "fh"  # lab ids (namespace names) start with it: fh<pid>
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_GRACE_S = 30  # a stopped agent's workers record the run's end within this (torchrun's own grace)
TIMED_OUT = 124  # the exit status of a lab stopped by its --timeout, as timeout(1) gives


class LabError(HarnessError):
    """A lab that cannot be brought up or run; one line naming what is wrong."""


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taken as Ctrl-C is: stop every node, tear down, exit 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def parse_rate(rate: str) -> float | None:
    """Bits per second from tc units (1gbit, 100mbit, 125mbps = bytes/s); None for 'none' (unshaped)."""
    try:
        return rates.parse_rate(rate, min_bps=MIN_RATE_BPS)
    except rates.RateError as exc:
        raise LabError(str(exc)) from None


def burst_bytes(rate_bps: float, mtu: int = 1500) -> int:
    """tbf burst: 2 ms of traffic at the rate, at least 16 KiB (measured: smaller bursts underperform) and
    at least one frame (tbf drops a packet larger than its bucket); at most what tc holds at the rate
    (telemetry/analysis/fabric_summary.py lab_burst_bytes: the rule the projection takes too)."""
    return lab_burst_bytes(rate_bps, mtu)


def queue_bytes(rate_bps: float) -> int:
    """tbf queue: 20 ms of traffic, at least 256 KiB. Measured at 100 Mbit/s: a deep queue (512 KiB and
    more) holds each direction's ACKs behind the other direction's data and bidirectional send/recv fell
    to 74-75% of the rate; 128-256 KiB gave 89-93%; 64 KiB dropped too much. The floor keeps slow links
    from dropping a whole gradient burst (then TCP retransmission timeouts dominate the step). At most tc's 32
    bits (`--rate 400gbps`, 3.2 Tbit/s, made the namespaces, then tc refused its limit of 8,000,000,000)."""
    return min(max(int(rate_bps / 8 * 0.02), 256 * 1024), lab_options.MAX_TBF_BYTES)


def parse_qdisc_counters(text: str) -> dict:
    """The root tbf's counters from `tc -s -j qdisc show dev DEV` (iproute2's JSON)."""
    try:
        rows = json.loads(text or "[]")
    except json.JSONDecodeError:
        return {"counters": None, "reason": "tc -s -j printed no JSON (iproute2 older than 4.13?)"}
    tbf = [r for r in rows if isinstance(r, dict) and r.get("kind") == "tbf"]
    if not tbf:
        return {"counters": None, "reason": "no tbf qdisc on the device"}
    return {k: tbf[0].get(k) for k in ("bytes", "packets", "drops", "overlimits", "requeues", "backlog")}


def _run(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:  # iproute2 prints its usage on several lines: one line, cut
        said = " ".join((proc.stderr or proc.stdout).split())
        allowed = ("; allowed: root with CAP_SYS_ADMIN and CAP_NET_ADMIN (a container: --privileged, or --cap-add "
                   "SYS_ADMIN --cap-add NET_ADMIN)") if "not permitted" in said.lower() else ""
        raise LabError(f"{what}: `{' '.join(cmd)}` failed: {said[:300]}{allowed}")


def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (bringing the namespaces up or tearing them down
    half way would leave some behind), then take effect."""
    return deferred(STOP_SIGNALS)


def check_host() -> None:
    if sys.platform != "linux":
        raise LabError("the fabric lab needs Linux network namespaces; this is " + sys.platform)
    if os.geteuid() != 0:
        raise LabError("the fabric lab needs root (it creates network namespaces and qdiscs); run it with sudo")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise LabError(f"the fabric lab needs `{tool}` from iproute2 (apt-get install iproute2)")


class Lab:
    """Namespaces, links and shaping; a context manager that always tears down."""

    def __init__(self, nodes: int, rate: str, lab_id: str | None = None, slow_node: int | None = None,
                 slow_rate: str | None = None, mtu: int = DEFAULT_MTU, burst=None, limit=None):
        if not MIN_MTU <= mtu <= MAX_MTU:
            raise LabError(f"--mtu: got {mtu}; expected {MIN_MTU} to {MAX_MTU} bytes (1500 Ethernet, 9000 jumbo frames)")
        if nodes < MIN_NODES:
            raise LabError(f"--nodes: got {nodes}; a fabric needs at least {MIN_NODES} nodes; allowed: {MIN_NODES} to "
                           f"{MAX_NODES} (ranks on one node talk over loopback, which no link shapes: torchrun "
                           "--standalone --nproc-per-node G -m trainer RECIPE runs them)")
        if nodes > MAX_NODES:
            raise LabError(f"--nodes: got {nodes}; at most {MAX_NODES}")
        self.nodes, self.rate, self.mtu = nodes, rate.strip().lower(), mtu  # tc reads units in any case
        if "," in rate:  # a rate per node, as a network engineer may try
            raise LabError(f"--rate: got {rate!r}; one rate for every link, per-node rates are not supported; allowed: "
                           "one tc rate (e.g. 100mbit), and --slow-node with --slow-rate for one slower node")
        self.rate_bps = parse_rate(rate.strip())  # its errors name the rate as written ('10G', not '10g')
        if self.rate_bps is not None and self.rate_bps < MIN_RATE_BPS:
            raise LabError(f"--rate: got {rate!r}; tc shapes in whole bytes per second: expected at least 8bit "
                           "(e.g. 100mbit, 1gbit), or 'none' for unshaped links")
        if (slow_node is None) != (slow_rate is None):
            raise LabError("--slow-node and --slow-rate go together: the node whose link is slow and its rate")
        if slow_node is not None and not 0 <= slow_node < nodes:
            raise LabError(f"--slow-node: got {slow_node}; allowed: a node from 0 to {nodes - 1}")
        self.slow_node = slow_node
        try:
            self.slow_rate_bps = parse_rate(slow_rate) if slow_rate is not None else None
            if self.slow_rate_bps is not None and self.slow_rate_bps < MIN_RATE_BPS:
                raise LabError(f"--rate: got {slow_rate!r}; tc shapes in whole bytes per second: expected at "
                               "least 8bit (e.g. 10mbit)")
        except LabError as exc:  # the same rule as --rate, named for this option; a slow link is shaped
            raise LabError(str(exc).replace("--rate:", "--slow-rate:", 1)
                           .replace(", or 'none' for unshaped links", "")) from None
        if slow_rate is not None and self.slow_rate_bps is None:
            raise LabError("--slow-rate: got 'none'; expected a tc rate such as 10mbit")
        if self.slow_rate_bps is not None and self.rate_bps is not None and self.slow_rate_bps >= self.rate_bps:
            # in tc a rate in bps is bytes per second: `--rate 1mbps` is 8 Mbit/s, as fast as `--slow-rate 8mbit`
            in_bits = (f" ({rate!r} is {rates.bits_text(self.rate_bps)}, {slow_rate!r} "
                       f"{rates.bits_text(self.slow_rate_bps)}: "
                       + ("tc's kbps, mbps and gbps are bytes per second)" if any(rates.bytes_unit_warning(r)
                          for r in (rate, slow_rate)) else "tc's kibit, mibit and gibit are 1024-based)")
                       if any(rates.misreadable(r) for r in (rate, slow_rate)) else "")
            raise LabError(f"--slow-rate: got {slow_rate!r}, not slower than --rate {rate!r}{in_bits}; expected a rate "
                           "below --rate (one slow link among healthy ones)")
        self.slow_rate = slow_rate.strip().lower() if slow_rate is not None else None
        # --burst/--limit: every shaped link's tbf bucket and queue in bytes, instead of the rule's (burst_bytes,
        # queue_bytes); both need a link to shape
        self.burst = self.limit = None
        for option, given in (("--burst", burst), ("--limit", limit)):
            if given is None:
                continue
            if self.rate_bps is None and self.slow_rate_bps is None:
                raise LabError(f"{option}: got {given!r}, but --rate none shapes no link: there is no tbf to size; "
                               "allowed: with a shaped --rate (or --slow-rate)")
            try:
                size = lab_options.parse_size(given, option, mtu)
            except lab_options.SizeError as exc:
                raise LabError(str(exc)) from None
            setattr(self, option[2:], size)
        for option, given, bps in (("--rate", rate, self.rate_bps), ("--slow-rate", slow_rate, self.slow_rate_bps)):
            if bps and (problem := lab_options.bucket_problem(option, burst if burst is not None else given, bps,
                                                                 self.link_burst(bps), mtu, burst is not None)):
                raise LabError(problem)
        self.id = lab_id or f"{ID_PREFIX}{os.getpid() % 100000}"
        self.subnet = f"{SUBNET_BASE}.{os.getpid() % 250 + 1}"
        self.namespaces = [f"{self.id}n{i}" for i in range(nodes)]
        self.switch = f"{self.id}sw" if nodes > 2 else None
        self.all_namespaces = self.namespaces + ([self.switch] if self.switch else [])
        self.created: list[str] = []
        self.shaped: list[tuple[str, str]] = []  # (namespace, device) of every tbf the lab added
        # the counters when the run's first step was recorded: what the queues dropped before it (rendezvous,
        # the start-up broadcast of the model: node 0 sends it to every peer at once) is told apart
        self.counters_at_first_step: dict | None = None

    def address(self, node: int) -> str:
        return f"{self.subnet}.{node + 1}"

    def describe(self) -> dict:
        return {"nodes": self.nodes, "rate": self.rate, "rate_bps": self.rate_bps,
                "burst_bytes": self.link_burst(self.rate_bps), "mtu": self.mtu,
                "queue_bytes": self.link_queue(self.rate_bps),
                "burst_given": self.burst is not None, "limit_given": self.limit is not None,
                "topology": "bridge" if self.switch else "veth pair", "interface": IFACE,
                # every node computes on this one host's cores: a projection to more lab nodes needs it
                "host_cpus": len(os.sched_getaffinity(0)),
                "slow_node": self.slow_node, "slow_rate": self.slow_rate, "slow_rate_bps": self.slow_rate_bps,
                "slow_burst_bytes": self.link_burst(self.slow_rate_bps),
                "slow_queue_bytes": self.link_queue(self.slow_rate_bps),
                "addresses": [self.address(i) for i in range(self.nodes)], "namespaces": self.namespaces,
                "switch": self.switch}

    def link_burst(self, bps: float | None) -> int | None:
        return None if bps is None else self.burst or burst_bytes(bps, self.mtu)

    def link_queue(self, bps: float | None) -> int | None:
        return None if bps is None else self.limit or queue_bytes(bps)

    def _shape(self, ns: str, dev: str, slow: bool = False) -> None:
        rate, bps = (self.slow_rate, self.slow_rate_bps) if slow else (self.rate, self.rate_bps)
        if bps is None:
            return
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
              "burst", str(self.link_burst(bps)), "limit", str(self.link_queue(bps))],
             f"shaping {ns}/{dev} at {rate}")
        self.shaped.append((ns, dev))

    def qdisc_counters(self) -> dict:
        """Each shaped link's tbf counters since the lab came up, keyed "namespace/device": bytes and packets
        sent, packets dropped (the queue was full: TCP retransmits them, time the projection does not model),
        overlimits (packets that waited for tokens) and requeues. The interface counters the run records hold
        none of this. A link whose counters cannot be read is null with the reason."""
        out = {}
        for ns, dev in self.shaped:
            proc = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev", dev],
                                  capture_output=True, text=True, timeout=30)
            out[f"{ns}/{dev}"] = (parse_qdisc_counters(proc.stdout) if proc.returncode == 0 else
                                  {"counters": None, "reason": (proc.stderr or proc.stdout).strip()[:200]})
        return out

    def clear_leftovers(self) -> None:
        """Namespaces left by labs that were killed (SIGKILL, a crash: no teardown ran) are deleted, one line
        each, when provably nobody's (leftover_of_a_gone_lab); one of this lab's names held by anything else
        is a LabError naming it and how to remove it."""
        for ns in leftover_namespaces():
            mine = ns in self.all_namespaces
            if not mine and not ns.startswith(ID_PREFIX):  # names of other kinds are never checked
                continue
            gone, why = leftover_of_a_gone_lab(ns)
            if gone:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
                say(f"[lab] removed namespace {ns}, {why}", sys.stderr)
            elif mine:
                raise LabError(f"this lab needs the name {ns}: {why}")

    def up(self) -> "Lab":
        with signals_deferred():
            self.clear_leftovers()
            self._up()
        return self

    def _up(self) -> None:
        mark = owner_mark()
        for ns in self.all_namespaces:
            _run(["ip", "netns", "add", ns], f"creating namespace {ns}")
            self.created.append(ns)
            _run(["ip", "-n", ns, "link", "set", "lo", "alias", mark, "up"], f"loopback in {ns}")
        if self.switch is None:
            a, b = self.namespaces
            _run(["ip", "link", "add", IFACE, "netns", a, "type", "veth", "peer", "name", IFACE, "netns", b],
                 "veth pair")
        else:
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"], "bridge")
            _run(["ip", "-n", self.switch, "link", "set", "br0", "up"], "bridge up")
            for i, ns in enumerate(self.namespaces):
                port = f"p{i}"
                _run(["ip", "link", "add", IFACE, "netns", ns, "type", "veth", "peer", "name", port, "netns",
                      self.switch], f"link of node {i}")
                _run(["ip", "-n", self.switch, "link", "set", port, "mtu", str(self.mtu), "master", "br0", "up"],
                     f"switch port {i}")
                self._shape(self.switch, port)  # the switch port's egress: traffic towards node i
        for i, ns in enumerate(self.namespaces):
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", IFACE], f"address of node {i}")
            _run(["ip", "-n", ns, "link", "set", IFACE, "mtu", str(self.mtu), "up"], f"link up on node {i}")
            self._shape(ns, IFACE, slow=i == self.slow_node)  # node i's egress

    def down(self) -> list[str]:
        """Delete every namespace the lab made (their links and qdiscs go with them); returns leftovers."""
        with signals_deferred():
            for ns in reversed(self.created):
                subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            self.created = []
        return self.left_behind()

    def left_behind(self) -> list[str]:
        """This lab's namespaces that still exist (by exact name: another lab's id may start with this one's)."""
        return [ns for ns in leftover_namespaces() if ns in self.all_namespaces]

    def __enter__(self):
        try:
            return self.up()
        except BaseException:
            self.down()
            raise

    def __exit__(self, *exc):
        self.down()
        return False


def cut_link(lab: Lab, node: int) -> None:
    """Set node's fabric link down mid-run, as a pulled cable would: its peers stop hearing from it (the
    namespaces stay; tear-down removes them as usual). For fault tests."""
    _run(["ip", "-n", lab.namespaces[node], "link", "set", IFACE, "down"], f"cutting node {node}'s link")


def node_name(i: int) -> str:
    """Node i's host name inside the lab (FABRIC_HARNESS_NODE): its run.json, run.lock and live series name it."""
    return f"lab-node{i}"


def leftover_namespaces() -> list[str]:
    return lab_leftovers.namespaces()


def run_in_lab(lab: Lab, nproc: int, recipe_args: list[str], output_dir: str, timeout_s: float,
               port: int, program: list[str] | None = None) -> int:
    """One torchrun agent per node; node 0's output is shown, every node's is kept in logs/. The trainer
    runs RECIPE_ARGS with output_dir set, unless `program` (a script and its arguments) is given."""
    logs = os.path.join(output_dir, LOGS)
    os.makedirs(logs, exist_ok=True)
    lab_info = json.dumps(lab.describe())
    procs, threads, files = [], [], []
    for i, ns in enumerate(lab.namespaces):
        env = {**os.environ, "GLOO_SOCKET_IFNAME": IFACE, "NCCL_SOCKET_IFNAME": IFACE, "OMP_NUM_THREADS": "1",
               "FABRIC_HARNESS_NODE": node_name(i), "FABRIC_HARNESS_LAB": lab_info, "PYTHONUNBUFFERED": "1",
               # the lab's nodes share one host: CPU and gloo ranks, also on a machine with a GPU
               "CUDA_VISIBLE_DEVICES": ""}
        env[lab_leftovers.STOP_WITH] = str(os.getpid())  # its agent is stopped when this lab dies (kill -9)
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "launch.lab_agent",
               f"--nnodes={lab.nodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={lab.address(0)}:{port}", f"--rdzv-id={lab.id}",
               f"--rdzv-conf=is_host={1 if i == 0 else 0}", f"--local-addr={lab.address(i)}",
               "--max-restarts=0", *(program or ["-m", "trainer", *recipe_args, f"output_dir={output_dir}"])]
        log = open(os.path.join(logs, f"lab-node{i}.log"), "w", encoding="utf-8")
        files.append(log)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        procs.append(proc)
        sinks = [log, sys.stdout] if i == 0 else [log]
        t = threading.Thread(target=pump, args=(proc.stdout, sinks), daemon=True)
        t.start()
        threads.append(t)
    deadline, started = time.monotonic() + timeout_s, time.time()
    codes: list[int | None] = [None] * len(procs)
    metrics = os.path.join(output_dir, METRICS)
    timed_out = False
    try:
        while any(c is None for c in codes):
            if lab.counters_at_first_step is None and lab.shaped and _has_a_step_since(metrics, started):
                lab.counters_at_first_step = lab.qdisc_counters()
            for i, p in enumerate(procs):
                if codes[i] is None:
                    codes[i] = p.poll()
            if any(c not in (None, 0) for c in codes) or codes[0] is not None:
                # a node failed, or node 0 finished: give the others a short grace, then stop them
                # (a torchrun agent can hang after its workers end). Name the failed node: only node 0's
                # output is shown, and its error is the lost peer's echo (torchrun's traceback from node 0)
                for i, c in enumerate(codes):
                    if c not in (None, 0):
                        say(f"[lab] node {i}'s torchrun agent exited {c} (its log: {os.path.join(logs, f'lab-node{i}.log')})",
                            sys.stderr)
                grace = time.monotonic() + 30
                while any(c is None for c in codes) and time.monotonic() < grace:
                    time.sleep(0.2)
                    codes = [c if c is not None else p.poll() for c, p in zip(codes, procs)]
                break
            if time.monotonic() > deadline:
                say(f"[lab] timed out after {timeout_s:g} s (--timeout); stopping every node", sys.stderr)
                timed_out = True
                break
            time.sleep(0.2)
    finally:  # held against a second Ctrl-C: cut half way, it left the workers running and run.json 'running'
        with signals_deferred():
            _stop_agents(procs, threads, files, output_dir)
    if timed_out:  # as timeout(1) says it: the job recorded itself as interrupted (130), which Ctrl-C also is
        return TIMED_OUT
    codes = [p.returncode for p in procs]
    failed = [c for c in codes if c != 0]
    if not failed:
        return 0
    # torchrun reports any worker failure as 1; the job's own exit code (2 = bad input) says more
    try:
        with open(os.path.join(output_dir, RUN_JSON), encoding="utf-8") as f:
            recorded = json.load(f).get(RunKey.EXIT_CODE)
        if isinstance(recorded, int) and recorded != 0:
            return recorded
    except (OSError, json.JSONDecodeError):
        pass
    return failed[0] if failed[0] > 0 else 1


def _stop_agents(procs: list, threads: list, files: list, output_dir: str) -> None:
    """Stop every torchrun agent still running, let its workers record their end, close the nodes' logs."""
    orphans = []
    for p in procs:
        if p.poll() is None:
            orphans += _children(p.pid)  # torchrun starts each worker in a session of its own
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait(timeout=30)
    if any(_alive(pid) for pid in orphans):
        say(f"[lab] stopping: waiting up to {WORKER_GRACE_S} s for the workers to record their end in run.json "
            "(a further Ctrl-C waits for this too)", sys.stderr)
    if _let_orphans_finish(orphans):
        _close_abandoned_record(output_dir)
    for t in threads:
        t.join(timeout=5)
    for f in files:
        f.close()


def _children(pid: int) -> list[int]:
    """The processes `pid` started (a torchrun agent's workers), from /proc; none when it is gone."""
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                found += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return found


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie has ended; an orphan's is reaped by init, not by us)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _let_orphans_finish(pids: list[int]) -> list[int]:
    """The workers of a stopped agent: each sees its agent gone, finishes its step, saves it and records the
    run as interrupted (trainer/stop.py). Waited for, so that run.json holds that status once the lab
    returns (a launcher reads it at once: launch.evaluate); they had only the output pipe's 5 s to do it.
    Given torchrun's own grace for its workers (30 s), then killed; the ones killed are returned."""
    deadline = time.monotonic() + WORKER_GRACE_S
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    killed = []
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


def _close_abandoned_record(output_dir: str) -> None:
    """run.json of workers the lab had to kill (stuck in start-up or inside a collective, they never recorded
    their end): 'running' would say a job runs that is gone, so it is closed as interrupted, saying why."""
    path = os.path.join(output_dir, RUN_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        if info.get(RunKey.STATUS) != "running":
            return
        info.update({RunKey.STATUS: "interrupted", RunKey.EXIT_CODE: 128 + signal.SIGINT,
                     RunKey.END_TIME: datetime.now(timezone.utc).isoformat(timespec="seconds"),
                     RunKey.ERROR: f"stopped by the lab: its workers had not recorded their end {WORKER_GRACE_S} s after "
                                   "their torchrun agents were stopped (in start-up or inside a collective), so the lab "
                                   "killed them"})
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
        os.replace(path + ".tmp", path)
    except (OSError, ValueError, AttributeError):
        return
    say("[lab] the workers were killed before they recorded their end: run.json closed as interrupted", sys.stderr)


def _has_a_step_since(path: str, since: float) -> bool:
    """metrics.jsonl's last line is a step recorded at or after `since` (epoch seconds): this lab's run has
    recorded its first step. A resumed run's file holds the earlier attempt's steps from the start (their
    time before `since`): taken for this run's first step, its start-up drops read as drops during the steps."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 65536))
            lines = f.read().splitlines()
    except OSError:
        return False
    for raw in reversed(lines):
        try:
            last = json.loads(raw)
        except ValueError:  # a line being written
            continue
        when = last.get(StepKey.TIME) if isinstance(last, dict) else None
        return isinstance(when, (int, float)) and when >= since
    return False


def _output_dir(recipe_args: list[str]) -> str:
    for arg in reversed(recipe_args[1:]):  # the last one, as the trainer reads a key given twice (and warns)
        if arg.startswith("output_dir="):
            return arg.split("=", 1)[1]
    import yaml
    try:
        with open(recipe_args[0], encoding="utf-8") as f:
            return (yaml.safe_load(f) or {}).get("output_dir") or "runs/lab"
    except (OSError, yaml.YAMLError):
        return "runs/lab"


def _recipe_problems(recipe_args: list[str], world: int | None) -> list[str]:
    """The recipe, its overrides, its layout on the lab's world and its output_dir, checked as python -m trainer
    will check them on every node: a mistake is one line here, not a torchrun failure in each namespace.
    `world` None: --nodes was refused, so the layout is not judged on it (that would be the same mistake again)."""
    from trainer.cli import other_recipes_run
    from trainer.config import RecipeError, load_recipe
    from trainer.layout import resolve_layout
    from trainer.runlock import RunLock

    if "--dry-run" in recipe_args[1:]:  # the trainer's flag, which the lab (it runs the job) does not pass on
        return [f"--dry-run after the recipe: the lab runs the job on its nodes and takes key=value overrides there; "
                f"to check the recipe on the lab's world without running it: python -m trainer {recipe_args[0]} "
                f"--dry-run --world-size {world or 'N'}"]
    try:
        recipe = load_recipe(recipe_args[0], recipe_args[1:])
    except RecipeError as exc:
        return list(exc.problems)
    _, problems = resolve_layout(recipe, world) if world is not None else (None, [])
    if not problems and (problem := output_dir_problem(recipe.output_dir, "output_dir")
                         # another recipe's run there: the trainer refuses it on every node, after the lab has
                         # written its lab.json over that run's (a 3-node sweep's record then named a 2-node lab)
                         or other_recipes_run(recipe.output_dir, recipe)
                         # a live run there (another lab's, a torchrun's): the trainer refuses it on every node,
                         # after this lab has written its lab.json over the live run's (two labs, one output_dir)
                         # (its trainer's lock names its node, lab-nodeI, a name of this host: judged by its pid)
                         or RunLock(recipe.output_dir, rank=1).in_use(tuple(node_name(i) for i in range(MAX_NODES)))):
        problems = [problem]
    return problems


LINK_KEYS = ("nodes", "nproc_per_node", "rate_bps", "mtu", "slow_node", "slow_rate_bps")


def _earlier_labs(output_dir: str, now: dict) -> tuple[list, str | None]:
    """The labs earlier attempts in output_dir ran on (lab.json's `earlier_labs`, kept when this lab writes its
    own), and a warning when the last one's links differ: a resumed run keeps the steps measured there, and its
    step times, the projection and compare then mix two fabrics (a 3-node run resumed at 20mbit from 5mbit)."""
    try:
        with open(os.path.join(output_dir, LAB), encoding="utf-8") as f:
            old = json.load(f)
    except FileNotFoundError:  # no lab's run; steps recorded there are a run made off the lab (torchrun on the host)
        if not _has_text(os.path.join(output_dir, METRICS)):
            return [], None
        off = {**{k: None for k in (*LINK_KEYS, "rate", "slow_rate")}, "off_lab": True, "replaced_at": time.time()}
        return [off], (f"[lab] warning: {output_dir} holds a run made off the lab (no lab.json); a resume keeps its "
                       "steps measured there, which its report and projection leave out (lab.json `earlier_labs`); "
                       "for a whole run on this lab use a new output_dir")
    except (OSError, ValueError):
        return [], None
    if not isinstance(old, dict):
        return [], None
    earlier = [e for e in old.get("earlier_labs") or [] if isinstance(e, dict)]
    last = {k: old.get(k) for k in (*LINK_KEYS, "rate", "slow_rate")}
    if all(last[k] == now.get(k) for k in LINK_KEYS):
        return earlier, None
    was = f"{last['nodes']} x {last['nproc_per_node']} at {lab_links(last)}"
    last["replaced_at"] = time.time()  # steps recorded before it ran on that lab: the run's reader leaves them out
    return earlier + [last], (
        f"[lab] warning: {output_dir} holds a run made on another lab ({was}, MTU {last['mtu']}); a resume keeps its "
        "steps measured there, which its report and projection leave out (lab.json `earlier_labs`); for a "
        "whole run on this lab use a new output_dir")


def _has_text(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _drops(counters: dict) -> int | None:
    read = [c["drops"] for c in counters.values() if isinstance(c.get("drops"), int)]
    return sum(read) if read and len(read) == len(counters) else None


def _record_qdiscs(lab: Lab, output_dir: str) -> None:
    """The shaped links' tbf counters into lab.json (`qdisc`, per link, and `tbf_drops`, their sum, since the
    lab came up; `tbf_drops_after_first_step`, those once the run's first step was recorded) and one line when
    the queues dropped: drops during the steps mean retransmissions, a step slower than bytes over rate says.
    Drops before it (node 0 broadcasting the model to every peer at once) slow the start-up only."""
    path = os.path.join(output_dir, LAB)
    counters = lab.qdisc_counters()
    drops = _drops(counters)
    first = lab.counters_at_first_step
    before = _drops(first) if first else None
    after = drops - before if drops is not None and before is not None else None
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        info.update(qdisc=counters, tbf_drops=drops, tbf_drops_after_first_step=after)
        if drops is None:  # unknown is null with its reason, never 0
            info["tbf_drops_reason"] = ("no link was shaped (--rate none): no tbf queue to drop packets" if not counters
                                        else "a shaped link's counters could not be read (see `qdisc`)")
        if after is None and drops is not None:
            info["tbf_drops_after_first_step_reason"] = (
                "the run recorded no step (a collective sweep, or it failed before its first step)" if first is None
                else "a shaped link's counters could not be read at the first step")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
        os.replace(path + ".tmp", path)
    except (OSError, json.JSONDecodeError) as exc:
        say(f"[lab] warning: could not record the links' tbf counters in {path}: {exc}", sys.stderr)
        return
    if after:
        say(f"[lab] the shaped links' queues dropped {after} packets during the steps ({drops} in all; lab.json "
            "`qdisc`): TCP retransmitted them, so steps ran slower than bytes over rate", sys.stderr)
    elif drops:
        when = "before the first step was recorded (start-up: the model's broadcast to every peer at once)" \
            if after == 0 else "(when is unknown: no step was recorded)"
        say(f"[lab] the shaped links' queues dropped {drops} packets {when}; lab.json `qdisc`", sys.stderr)


def _first_line(lab: Lab, nproc: int, output_dir: str) -> str:
    """The lab's console line once it is up: nodes, ranks, topology, links and the run directory."""
    shaped = (f"{lab_links(lab.describe())} (burst {lab.link_burst(lab.rate_bps)} B"
              + (f", queue {lab.limit} B" if lab.limit else "") + f", MTU {lab.mtu})"
              if lab.rate_bps else f"{lab_links(lab.describe())} (MTU {lab.mtu})")
    return (f"[lab] {lab.nodes} nodes x {nproc} rank{'s' if nproc != 1 else ''}, {lab.describe()['topology']}, "
            f"links {shaped}; run directory {output_dir}")


def _unrecognized(extra: list[str], separated: bool) -> str:
    where = (f"allowed: -- {extra[0]} [key=value ...] after the lab's options (the `--` starts the recipe's part)"
             if not extra[0].startswith("-") and not separated else "see python -m launch.lab --help")
    return f"unrecognized arguments: {' '.join(extra)}; {where}"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    ours, recipe_args = argv[:split], argv[split + 1:]
    p = OneLineParser(prog="python -m launch.lab", usage="python -m launch.lab --nodes N [--nproc-per-node G] --rate "
                      "RATE -- RECIPE [key=value ...]", description="Run a recipe across emulated nodes joined by "
                      "shaped links.")
    p.add_argument("--nodes", type=int, required=True, help="emulated nodes (network namespaces), 2 or more")
    p.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node (default 1)")
    p.add_argument("--rate", required=True, help="tc rate per link and direction (1gbit, 100mbit, ...) or none")
    p.add_argument("--slow-node", type=int, default=None, help="node whose own egress is shaped at --slow-rate")
    p.add_argument("--slow-rate", default=None, help="tc rate of the slow node's egress (e.g. 10mbit)")
    p.add_argument("--mtu", type=int, default=DEFAULT_MTU,
                   help="frame size of the lab's links (default 1500; 9000 for jumbo frames as on training fabrics)")
    p.add_argument("--timeout", type=lab_options.seconds, default=1800, help="seconds before every node is stopped (default 1800)")
    p.add_argument("--port", type=int, default=29400, help="rendezvous port on node 0 (default 29400)")
    for name, what in (("--burst", "bucket (64k, 2m; default 2 ms of the rate, >= 16 KiB)"),
                       ("--limit", "queue (default 20 ms of the rate, >= 256 KiB)")):
        p.add_argument(name, default=None, help=f"every shaped link's tbf {what} in bytes as tc writes sizes")
    if given := lab_options.option_problems(ours):
        return print_errors(*given)
    args, extra = p.parse_known_args(ours)
    if extra:  # a recipe (or its overrides) without the `--` before it
        return print_errors(_unrecognized(extra, "--" in argv))
    if not recipe_args:
        p.error("give the recipe after --, e.g. -- recipes/tiny_llama_lora.yaml max_steps=10")
    if args.nproc_per_node < 1:
        p.error(f"--nproc-per-node: got {args.nproc_per_node}; expected an integer >= 1")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        p.error(f"--timeout: got {args.timeout:g}; expected a number of seconds above 0")
    if not 1 <= args.port <= 65535:
        p.error(f"--port: got {args.port}; expected a TCP port from 1 to 65535")
    problems: list = []
    try:  # the lab's own arguments and the recipe, every problem in one pass
        lab = Lab(args.nodes, args.rate, slow_node=args.slow_node, slow_rate=args.slow_rate, mtu=args.mtu,
                  burst=args.burst, limit=args.limit)
    except LabError as exc:
        problems.append(exc)
    nodes_ok = MIN_NODES <= args.nodes <= MAX_NODES
    workers = args.nodes * args.nproc_per_node
    # every emulated node's workers run on this one host; the recipe's layout judged on a world this host cannot
    # start would be a second line about the same numbers
    crowd = nodes_ok and host_capacity.workers_problem(
        "--nodes x --nproc-per-node", f"{args.nodes} x {args.nproc_per_node}", workers, host_capacity.available_bytes())
    problems += ([crowd] if crowd else []) + _recipe_problems(recipe_args, workers if nodes_ok and not crowd else None)
    if problems:
        return print_errors(*problems)  # before any namespace exists: nothing to tear down
    try:
        check_host()
        for option, rate in (("--rate", args.rate), ("--slow-rate", args.slow_rate)):
            if rate and (warning := rates.bytes_unit_warning(rate, option)):
                say(warning, sys.stderr)
        output_dir = os.path.abspath(_output_dir(recipe_args))
        recipe_args = [a for a in recipe_args if not a.startswith("output_dir=")]
        if orphans := lab_leftovers.output_dir_problem(output_dir, ID_PREFIX, lab.all_namespaces):
            raise LabError(orphans)  # a killed lab's ranks: rank 0's run.lock went with it
    except LabError as exc:
        print_errors(exc)
        return 2

    def stop(signum, _frame):
        raise Interrupted(signum)
    # a signal the lab was started ignoring stays ignored (nohup's SIGHUP, SIGINT of a background job)
    old = {s: signal.signal(s, stop) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    code = 1
    try:
        # launch.evaluate's lab: stopped (and torn down) when the evaluation dies; inside the try, so an evaluation
        # gone before this line ends the lab with the interrupted line, not an Interrupted traceback
        lab_leftovers.stop_with_parent()
        with lab:
            say(_first_line(lab, args.nproc_per_node, output_dir))
            os.makedirs(output_dir, exist_ok=True)
            now = {**lab.describe(), "nproc_per_node": args.nproc_per_node, "recipe": recipe_args}
            earlier, warning = _earlier_labs(output_dir, now)
            if warning:
                say(warning, sys.stderr)
            with open(os.path.join(output_dir, LAB), "w", encoding="utf-8") as f:
                json.dump({**now, **({"earlier_labs": earlier} if earlier else {})}, f, indent=1)
            try:
                code = run_in_lab(lab, args.nproc_per_node, recipe_args, output_dir, args.timeout, args.port)
            finally:  # an interrupted run keeps what its links did too
                with signals_deferred():
                    _record_qdiscs(lab, output_dir)
    except LabError as exc:
        print_errors(exc)
        code = 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (a launcher stopping the lab)
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        say(f"[lab] interrupted by {signal.Signals(signum).name}; every node was stopped", sys.stderr)
        code = 128 + signum  # as a shell reports a command ended by that signal
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
    left = lab.left_behind()
    if left:
        say(f"[lab] warning: namespaces left behind: {', '.join(left)}", sys.stderr)
    else:
        what = f"{lab.nodes} nodes" + (" and the switch" if lab.switch else "")
        say(f"[lab] torn down ({len(lab.all_namespaces)} namespaces removed: {what})")
    return code


if __name__ == "__main__":
    sys.exit(main())
