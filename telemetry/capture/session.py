"""The telemetry library's one object: `start_step()` / `end_step()` around each optimizer step.

    tel = Telemetry(TelemetrySettings(), run_dir="runs/x")   # rank, world (and, unless given, the CUDA device) read at start
    tel.start()
    for step in ...:
        tel.start_step(step)
        ... train ...
        record = tel.end_step(step, step_time_s)   # a dict of fields for this step (rank 0: cross-rank too)
    tel.close()

Every rank appends its own values to ranks/rank<r>.telemetry.jsonl; rank 0's records also carry
min/mean/max/max_rank across ranks and job-wide sums, reduced to rank 0 over a separate gloo group by a
binomial tree of fixed-size messages (the unwrapped isend/irecv, so the telemetry's own traffic is never
counted as the job's); the median needs every value, so every rank's vector goes up the same tree on
sampled steps only (see `cross_rank_median_every`). With `cross_rank_pipelined` and a record to fill later
(`end_step(into=...)`, as the recorder does) the tree goes up a level per step, and rank 0's figures of a step
come ceil(log2 world) steps later (telemetry/capture/cross_rank.py).
"""
from __future__ import annotations

import datetime
import json
import math
import os
import socket
import statistics
import sys
import time
from collections import deque

import torch
import torch.distributed as dist

from telemetry import coverage
from telemetry.capture import early, fabric
from telemetry.settings import TelemetrySettings  # noqa: F401 (the settings the session takes; re-exported)
from telemetry.capture.collectives import RECORDED_OPS as OPS, CollectiveTracer, enable_nccl_timing, harness_traffic, \
    set_host_map, totals
from telemetry.capture import rdma_devices
from telemetry.capture.counter_sampler import CounterSampler
from telemetry.capture.gloo_lazy import gloo_connects_lazily, lazy_gloo_group
from telemetry.capture.group_timeout import job_timeout
from telemetry.capture.counters import CounterReader, list_hcas, loss_verdict
from telemetry.capture import bmc_power, live_export
from telemetry.capture.congestion import summarize as congestion_figures
from telemetry.capture.cross_rank import (EXCHANGE, JOB_SUMS, REDUCED, ROWS, SIDE_GROUP, PipelinedTree,  # noqa: F401
                                          cross_rank_figures, reduction_payload, tree_reduce)
from telemetry.capture.cross_rank import height as tree_height
from telemetry.capture.energy import EnergyMeter, open_cpu_source, open_gpu_source, total_j
from telemetry.capture.environment import host_info, launcher_hosts
from telemetry.capture.exposed import CopyRate, ProfiledWindows, phase_times, step_comm_times
from telemetry.capture.link_probe import link_probe
from telemetry.stragglers import StragglerDetector, describe as describe_straggler, leaders
from telemetry.rundir import LOGS, RANK_EVENTS, RANK_TELEMETRY, RANKS, StepKey, rank_file


EVENTS_MAX_CALLS_PER_STEP = 4096  # collectives kept per step in the events file; the rest are counted
EVENTS_MAX_BYTES = 256 << 20  # per rank; past this the file gets one last line saying so
EXPORT_BARRIER_S = 60  # how long rank 0 waits at close for the other ranks' files before exporting


MEDIAN_EVERY_STEP_UP_TO = 16  # ranks: up to here sending every rank's values each step costs next to nothing
MEDIAN_EVERY_AT_SCALE = 100  # steps between medians above that (rank 0 receives world x 160 bytes)

def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def cuda_device_in_use(local_rank: int) -> torch.device:
    """The CUDA device this process computes on where it was not named: the current one (a framework's
    torch.cuda.set_device); but where that is still the default 0 on a later local rank with a GPU of its own
    (a script that moved its model with .to(local_rank) and never set the device), the local rank's, as torch's
    barrier guesses a rank's device: GPU 0 would be every rank's on the host."""
    current = torch.cuda.current_device()
    if current == 0 and 0 < local_rank < torch.cuda.device_count():
        return torch.device("cuda", local_rank)
    return torch.device("cuda", current)


def launcher_rank(environ, rank: int, world: int) -> tuple[int, int]:
    """(rank, world) from a launcher's RANK and WORLD_SIZE (torchrun, Slurm scripts), else those given."""
    try:
        got_rank, got_world = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return rank, world
    return (got_rank, got_world) if 0 <= got_rank < got_world else (rank, world)


class Telemetry:
    def __init__(self, settings: TelemetrySettings | None = None, run_dir: str | None = None,
                 device: torch.device | None = None, nvml=None):
        self.s = settings or TelemetrySettings()
        self.run_dir = run_dir
        self.device = device or torch.device("cpu")
        self._device_given = device is not None
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        # the process-wide tracer when one was installed early (telemetry/capture/early.py: before megatron binds
        # its collectives); a second tracer over it would record every call twice
        shared = early.process_tracer()
        self.tracer = shared or CollectiveTracer()
        self._shared_tracer = shared is not None
        self._nvml = nvml
        self._file = None
        self.last_step_written: int | None = None  # the newest step of this rank's file (the exporter waits for it)
        self._group = None
        self._loss_steps: list[dict] = []
        self.rdma_ports: dict | None = None  # counted / excluded RDMA ports (rdma_devices.select)
        self._rdma_from_log = False
        self.bmc: bmc_power.PowerSampler | None = None
        self._bmc_info: dict = {"source": None, "reason": "telemetry.bmc is not set"}
        self._server = {"energy_j": 0.0, "seconds": 0.0, "known": False}
        self._energy_total = {"gpu_j": 0.0, "cpu_j": 0.0, "known": False, "unknown": 0, "intervals": 0}
        self._exposed: list[dict] = []
        self._t_step = None
        self._t_eval = None
        self._events = None  # ranks/rank<r>.events.jsonl, only when "trace" is exported
        self._events_bytes = 0
        self._marks: list = []
        self._copy_rate = CopyRate()  # DDP's copy-back cost, learnt over steps (exposed.py)
        self.cross_rank_info: dict = {}
        self.hosts: list[str] | None = None  # every rank's host, in rank order (for the straggler report)
        self.stragglers: StragglerDetector | None = None  # rank 0's
        self.probe_ring: list[int] = []  # the first rank of each host
        self._hold = False  # NCCL: steps held for late completion reports (set at start)
        self._held: deque = deque()  # steps whose lines wait for their reports, oldest first
        self._reduce_next: dict | None = None  # the step reduced across ranks at the next step's end
        self._pipeline: PipelinedTree | None = None  # the tree a level per step (cross_rank.py), for end_step(into=)
        self._health: dict = coverage.empty()  # the run's tracer health: the steps' added up
        self.started = False

    # ------------------------------------------------------------ before the process group

    @staticmethod
    def prepare_environment(settings: TelemetrySettings, run_dir: str | None, backend: str) -> dict:
        """Environment that must be set before init_process_group (NCCL reads it once, gloo when each of
        its groups is created: GLOO_SOCKET_IFNAME on multi-host jobs, see fabric.pin_gloo_interface)."""
        applied = {}
        live_export.open_exporter(settings, run_dir)  # the node's port, taken before any GPU work
        if settings.enabled and (settings.cross_rank_every or backend == "gloo"):  # before any gloo group
            pin = fabric.pin_gloo_interface()
            if pin["pinned"]:
                applied["GLOO_SOCKET_IFNAME"] = pin["interface"]
        if settings.enabled and backend == "nccl":
            enable_nccl_timing()
            if settings.nccl_debug and run_dir:
                os.makedirs(os.path.join(run_dir, LOGS), exist_ok=True)
                applied.update(fabric.configure_nccl_logging(os.path.join(run_dir, LOGS),
                                                             tuning=settings.nccl_tuning))
        return applied

    # ------------------------------------------------------------ lifecycle

    def start(self, trace: bool = True) -> None:
        """trace=False: the meters only (energy, power, NIC/RDMA counters) read through interval(), with no
        collective tracer, profiler or side group: the collective sweep times collectives itself, and a
        wrapper around each call would add to a 4-byte all-reduce's microseconds."""
        if not self.s.enabled or self.started:
            return
        if dist.is_initialized():  # a framework may set the process group up after this was built (HF's Trainer)
            self.rank, self.world = dist.get_rank(), dist.get_world_size()
        else:  # started before any group: the launcher's RANK/WORLD_SIZE, or every rank would write as rank 0
            self.rank, self.world = launcher_rank(os.environ, self.rank, self.world)
        if not self._device_given and torch.cuda.is_available():  # as RunRecorder: the device the framework set
            self.device = cuda_device_in_use(self.local_rank)
        live_export.open_exporter(self.s, self.run_dir)  # open already, unless the loop skipped prepare_environment
        self._traced = trace
        if trace:
            self.tracer.install()
        try:  # every rank decides alike: the held step's cross-rank reduction happens a step later everywhere
            self._hold = bool(self.s.hold_reports_s) and dist.is_initialized() and dist.get_backend() == "nccl"
        except (RuntimeError, ValueError):
            self._hold = False
        on_gpu = self.device.type == "cuda"
        self.gpu = EnergyMeter(open_gpu_source(self.device.index if on_gpu else None, nvml=self._nvml),
                               self.s.power_sample_interval_s)
        host_leader = self.local_rank == 0  # host-wide sources are read once per host
        self.cpu = EnergyMeter(open_cpu_source(self.s.sysfs)) if host_leader else None
        # read by sampler threads, never on the step path (ethtool -S is a process per NIC): counter_sampler.py.
        # Not during a collective sweep (trace=False): threads waking beside a microsecond all-reduce would
        # be in its timing; interval() reads the counters between sizes instead
        self.counters = (CounterSampler(CounterReader(self._interfaces(), root=self.s.sysfs, ethtool=self.s.ethtool),
                                        self.s.counter_sample_interval_s, start=trace) if host_leader else None)
        if self.counters is not None:
            self._choose_rdma_ports()
        if host_leader and self.s.bmc:
            self._start_bmc()
        trace_dir = os.path.join(self.run_dir, LOGS) if self.run_dir and self.s.save_traces else None
        self.windows = ProfiledWindows(self.s.profile_every, self.s.profile_steps, on_gpu, trace_dir, self.rank)
        if not trace:
            self.started = True
            return
        if dist.is_initialized() and self.world > 1 and self.s.cross_rank_every and not gloo_connects_lazily():
            # torch < 2.8 (the trainer refuses it; an adapter's loop may not): a job-wide gloo group would
            # connect every pair at start-up, so there is none (telemetry/capture/gloo_lazy.py)
            self.cross_rank_info = {"every": None, "reason": f"torch {torch.__version__} connects gloo groups "
                                    "eagerly (no TORCH_GLOO_LAZY_INIT, torch 2.8): no job-wide side group, no "
                                    "cross-rank reduction"}
        elif dist.is_initialized() and self.world > 1 and self.s.cross_rank_every:
            gloo = fabric.pin_gloo_interface()  # before the group: gloo reads it at creation
            timeout = job_timeout()
            # CPU-side, off the training streams; the tree talks to log2(world) peers: lazy connections
            self._group = lazy_gloo_group(timeout=timeout, group_desc=SIDE_GROUP)
            if self.s.cross_rank_pipelined:
                self._pipeline = PipelinedTree(self.rank, self.world, self._group, self.tracer.original("isend"),
                                               self.tracer.original("irecv"), len(REDUCED))
            every = self._median_every()
            median = ("not computed (cross_rank_median_every: 0)" if not every else
                      "every rank's values sent up the same tree every step" if every == 1 else
                      f"every rank's values sent up the same tree every {every} steps, null on other steps")
            self.cross_rank_info = {
                "every": self.s.cross_rank_every,
                "method": f"binomial-tree reduction to rank 0 over a gloo side group: each rank sends one "
                          f"{ROWS * len(REDUCED) * 8}-byte message per step; min, mean, max, max_rank, ranks, sums",
                # telemetry.cross_rank_pipelined: a tree level per step, off the step's critical path
                # (cross_rank.py): rank 0's figures of step s are complete at step s + lag_steps, its line then
                "pipelined": self._pipeline is not None,
                # (on NCCL a step is reduced a step later anyway: its late completion reports, hold_reports_s)
                "lag_steps": (tree_height(0, self.world) if self._pipeline is not None else 0) + int(self._hold),
                "median": median, "gloo_interface": gloo,
                # the job's: a peer that stops answering fails the tree as it fails the job's collectives
                "timeout_s": timeout.total_seconds() if timeout is not None else None}
            if timeout is None:
                self.cross_rank_info["timeout_reason"] = "torch did not say the job's timeout: torch's default"
            hosts: list = [None] * self.world  # once, before any step: the tracer drops calls outside steps
            with harness_traffic():
                dist.all_gather_object(hosts, host_info()["hostname"], group=self._group)
            self.hosts, self.probe_ring = hosts, leaders(hosts)
            if live_export.current() is not None:
                live_export.current().set_hosts(hosts)
            set_host_map(hosts)  # each process group's scope: inside one host or across hosts
            if self.s.link_probe_every:  # a first, untimed round opens the connections (TCP slow start)
                link_probe(self.tracer.original("isend"), self.tracer.original("irecv"), self._group, self.rank,
                           self.probe_ring, self.s.link_probe_bytes)
            if self.rank == 0:
                self.stragglers = StragglerDetector(hosts)
        if self.run_dir:
            os.makedirs(os.path.join(self.run_dir, RANKS), exist_ok=True)
            self._file = open(os.path.join(self.run_dir, rank_file(self.rank, RANK_TELEMETRY)), "a", encoding="utf-8")
            if "trace" in (self.s.export or ()):
                self._events = open(os.path.join(self.run_dir, rank_file(self.rank, RANK_EVENTS)), "a",
                                    encoding="utf-8")
                # perf_counter times become wall-clock seconds, so ranks line up on one timeline
                self._clock_offset = time.time() - time.perf_counter()
        self.started = True

    def _start_bmc(self) -> None:
        """One sampler per host. A BMC that cannot be reached leaves server power unknown, with the reason;
        the job itself goes on."""
        hosts = self._host_count()
        address, why = bmc_power.bmc_for_host(self.s.bmc, socket.gethostname(), self.rank == 0, hosts)
        if address is None:
            self._bmc_info = {"source": None, "reason": why}
            return
        try:
            source = bmc_power.open_bmc_source(address, self.s.bmc_chassis)
            self.bmc = bmc_power.PowerSampler(source, self.s.bmc_sample_interval_s).start()
            self._bmc_info = {**source.describe(), "interval_s": self.s.bmc_sample_interval_s}
        except bmc_power.BmcError as exc:
            self._bmc_info = {"source": None, "reason": str(exc)}
            print(f"[telemetry] server power not read: {exc}", file=sys.stderr, flush=True)

    def _host_count(self) -> int | None:
        """Hosts in the job, each read by its local rank 0: torchrun's agents (GROUP_WORLD_SIZE), right also where
        nodes run different numbers of ranks; else world size over the ranks per host (LOCAL_WORLD_SIZE)."""
        return launcher_hosts(self.world)

    def _choose_rdma_ports(self, nccl_devices: list[dict] | None = None) -> None:
        """Count the RDMA ports NCCL uses, not every HCA in the host (storage cards: rdma_devices.py): NCCL_IB_HCA
        at start, then the device list in this host's NCCL log once its first communicator is built."""
        sel = rdma_devices.select(list_hcas(self.s.sysfs), nccl_devices, os.environ.get("NCCL_IB_HCA"))
        self.counters.keep_ports(sel.counted)
        self.rdma_ports = sel.to_dict()
        self._rdma_from_log = bool(nccl_devices)

    def _rdma_ports_from_nccl_log(self) -> None:
        """Once, after the first step: this host's NCCL log names the devices NCCL opened (a bounded read)."""
        self._rdma_from_log = True  # tried: a log without a device list keeps the NCCL_IB_HCA selection
        if not self.run_dir or not self.counters.ports:
            return
        nccl = fabric.detect_nccl_transport(os.path.join(self.run_dir, LOGS), fabric.nccl_log_host())
        if nccl and nccl.get("ib_devices"):
            self._choose_rdma_ports(nccl["ib_devices"])

    def _interfaces(self) -> list[str] | None:
        if self.s.interfaces is not None:
            return self.s.interfaces
        for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            value = os.environ.get(var, "")
            if value and not value.startswith(("^", "=")):
                return [v for v in value.split(",") if v]
        used = fabric.gloo_interface().get("interface")
        return [used] if used else None

    def attach_ddp(self, ddp_model) -> None:
        if self.s.enabled:
            self.tracer.attach_ddp(ddp_model)

    # ------------------------------------------------------------ steps

    def start_step(self, step: int) -> None:
        if not self.started:
            return
        self.tracer.begin_step()
        self.windows.start(step)
        for meter in (self.gpu, self.cpu, self.bmc):  # the first step's energy counts from its start
            if meter is not None:
                meter.begin()
        if self.counters is not None:  # and its counters: what grew before is no step's (but its loss counts)
            before = self.counters.begin()
            if before:
                self._loss_steps.append(before)
        self._t_step = time.perf_counter()
        self._marks = []

    def mark(self, name: str) -> None:
        """A phase boundary (backward_begin/_end, optimizer_begin/_end): the exposed-communication estimate
        reads them, and the trace shows them. A list append."""
        if self.started:
            self._marks.append((name, time.perf_counter()))

    def end_step(self, step: int, step_time_s: float | None = None, into: dict | None = None) -> dict:
        """This step's telemetry fields (call on every rank: the cross-rank reduction is collective).

        `into`: the caller's record for the step, filled in place. On NCCL with `hold_reports_s` > 0, the
        communication fields of a step given `into` are completed at the next step's end (or at `flush`),
        when the watchdog's completion reports of its last calls (up to ~100 ms late) are in; until then the
        record carries `_held: True` (telemetry/rundir.py writes held records in order once released)."""
        if not self.started:
            return {}
        t_end = time.perf_counter()
        if step_time_s is None and self._t_step is not None:
            step_time_s = t_end - self._t_step
        hold = self._hold and into is not None
        step_comm = self.tracer.end_step(hold=hold)
        # the step's window: the loop's step time, ending now (never earlier than start_step), so that
        # exposed <= communication <= step time hold by construction
        lo = t_end - step_time_s if step_time_s is not None else -math.inf
        window = (max(lo, self._t_step) if self._t_step is not None else lo, t_end)
        record = into if into is not None else {}
        held = {StepKey.STEP: step, "record": record, StepKey.COMM: step_comm, "marks": self._marks, "window": window,
                StepKey.STEP_TIME_S: step_time_s, "t_end": t_end, "t_step": self._t_step}
        self._marks = []
        own: dict = {}  # telemetry's own fields: the rank line holds these
        profiled = self.windows.active()
        exposed = self.windows.stop(step)
        if profiled:
            own["profiled"] = True
        if exposed is not None:
            own["exposed"] = exposed
            self._exposed.append(exposed)
        gpu = self.gpu.step()
        gpu_j = _first(gpu["energy_j"])
        gpu_w = _first(gpu["power_w"])
        own[StepKey.GPU_ENERGY_J], own[StepKey.GPU_POWER_W] = gpu_j, gpu_w
        if gpu.get("reason"):
            own[StepKey.GPU_ENERGY_REASON] = gpu["reason"]
        host = {"cpu_j": None, "tx": None, "rx": None, "rdma_tx": None, "rdma_rx": None, "loss": None,
                "reorder": None, "server_j": None, "server_w": None}
        if self.cpu is not None:
            cpu = self.cpu.step()
            host["cpu_j"] = total_j(cpu["energy_j"])
            own["host"] = {"cpu_energy_j": host["cpu_j"]}
            if cpu.get("reason"):
                own["host"]["cpu_energy_reason"] = cpu["reason"]
        if self.counters is not None:
            if not self._rdma_from_log:  # NCCL built its communicators in step 1: its log names its devices
                self._rdma_ports_from_nccl_log()
            deltas, windows = self.counters.take(self._t_step, t_end)  # the latest samples: no read, no wait
            self._loss_steps.append(deltas)
            verdict = loss_verdict([deltas])
            host.update(tx=_sum_key(deltas, "net:", "tx_bytes"), rx=_sum_key(deltas, "net:", "rx_bytes"),
                        rdma_tx=_sum_key(deltas, "rdma:", "port_xmit_bytes"),
                        rdma_rx=_sum_key(deltas, "rdma:", "port_rcv_bytes"),
                        loss=sum(verdict["counts"].values()) if deltas else None,
                        reorder=sum(verdict.get("reordering", {}).values()) if deltas else None)
            own.setdefault("host", {})["counters"] = deltas
            own["host"]["counters_window"] = windows
            own["host"]["congestion"] = congestion_figures(deltas)
        if self.bmc is not None:
            server = self.bmc.step()
            host["server_j"], host["server_w"] = server["energy_j"], server["watts"]
            own.setdefault("host", {})["server_power"] = server
            if server["energy_j"] is not None:  # the window since the last step's end: nothing falls between
                self._server["energy_j"] += server["energy_j"]
                self._server["seconds"] += server["seconds"]
                self._server["known"] = True
        self._add_gpu_energy(gpu_j)
        if host["cpu_j"] is not None:
            self._energy_total["cpu_j"] += host["cpu_j"]
        # cross_rank_pipelined and a record to fill later: the tree goes up a level per step (cross_rank.py)
        pipelined = into is not None and self._pipeline is not None
        held.update(gpu_j=gpu_j, gpu_w=gpu_w, host=host, own=own, complete=False, reduced=False, pipelined=pipelined)
        record.update(own)
        if not hold and not pipelined:
            self._complete(held)
            self._reduce(held)
            self._write(held)
            return record
        if not hold:  # rank 0's metrics line of this step waits for its figures; its rank line need not
            self._complete(held)
            record["_held"] = True
            self._held.append(held)
            self._reduce(held)  # (a link probe's time joins the rank's own fields here)
            self._write_own(held)
            self._write_ready(t_end)
            return record
        # Held: the step's communication fields wait for the watchdog's reports, off this thread. Its
        # cross-rank reduction is made a step later on every rank alike (a collective: the same step
        # everywhere), from what is in by then; its lines are written once its reports are in, or
        # `hold_reports_s` after its end, in step order.
        record["_held"] = True
        self._held.append(held)  # before the reduction below: a failure there still leaves it to be written
        previous, self._reduce_next = self._reduce_next, held
        if previous is not None:
            self._reduce(previous)
        self._write_ready(t_end)
        return record

    def _write_ready(self, now: float, wait_s: float = 0.0) -> None:
        """Write the held steps, oldest first, that were reduced and whose reports are in (or overdue)."""
        while self._held:
            oldest = self._held[0]
            if not oldest["reduced"]:
                return
            overdue = now - oldest["t_end"] >= self.s.hold_reports_s
            if not (overdue or wait_s or not self.tracer.pending(oldest["comm"])):
                return
            self._complete(oldest, wait_s)
            self._write(self._held.popleft())

    def flush(self, collective: bool = True, wait_s: float | None = None) -> None:
        """Complete the steps still held for late completion reports, waiting up to `hold_reports_s` for them.
        `collective`: every rank calls this (the end of a completed run), so the last step's cross-rank
        figures are reduced as usual; False (a failing rank, close) leaves them out for that step."""
        last, self._reduce_next = self._reduce_next, None
        if last is not None:
            if collective:
                self._reduce(last)
            else:
                last["reduced"] = True
        if self._pipeline is not None and collective:  # the steps still on their way up the tree
            for owner, payload in self._pipeline.drain():
                self._reduced(owner, payload)
        if not collective:  # a rank stopping alone writes what it has, figures or not (even after a failed wait)
            if self._pipeline is not None:
                self._pipeline.abandon()
            for held in self._held:
                held["reduced"] = True
        self._write_ready(time.perf_counter(), self.s.hold_reports_s if wait_s is None else wait_s)

    def _complete(self, held: dict, wait_s: float = 0.0) -> None:
        """Close the step's calls (those still unreported count untimed) and compute its communication fields."""
        if held["complete"]:
            return
        step_comm = held["comm"]
        if any(not c.closed for c in step_comm.calls):
            self.tracer.release(step_comm, wait_s)
        held["own"].update(self._comm_fields(held))
        coverage.add(self._health, held["own"][StepKey.COMM_HEALTH])  # once per step, as finally recorded
        held["complete"] = True

    def _comm_fields(self, held: dict) -> dict:
        step_comm = held["comm"]
        comm = step_comm.summary()
        comm_bytes, _ = totals(comm)
        return {StepKey.COMM: comm, StepKey.COMM_BYTES: comm_bytes, StepKey.COMM_GROUPS: step_comm.group_summary(),
                StepKey.COMM_HEALTH: step_comm.health(),
                **step_comm_times(step_comm.calls, held["marks"], held["window"], self._copy_rate),
                **phase_times(held["marks"])}

    def _reduce(self, held: dict) -> None:
        """The cross-rank reduction (and link probe) of a step: collective, on every rank for the same step.
        A held step not yet complete is reduced from what its reports said so far (calls without one: no time)."""
        step, record = held["step"], held["record"]
        fields = held["own"] if held["complete"] else self._comm_fields(held)
        comm, comm_bytes, comm_time = fields["comm"], fields[StepKey.COMM_BYTES], fields[StepKey.COMM_TIME_S]
        step_time_s, host = held[StepKey.STEP_TIME_S], held["host"]
        # time outside collectives (stragglers.py); unknown when some collective went untimed
        compute = (step_time_s - (comm_time or 0.0)
                   if step_time_s is not None and (comm_time is not None or not comm) else None)
        mine = [step_time_s, comm_time, comm_bytes, *(comm.get(op, {}).get("time_s") for op in OPS), held["gpu_j"],
                held["gpu_w"], host["cpu_j"], host["tx"], host["rx"], host["rdma_tx"], host["rdma_rx"], host["loss"],
                host["reorder"], host["server_j"], host["server_w"], compute]
        reduced = (self._group is not None and step % self.s.cross_rank_every == 0) or self.world == 1
        probe = None
        if reduced and self._group is not None and self.s.link_probe_every and step % self.s.link_probe_every == 0:
            probe = link_probe(self.tracer.original("isend"), self.tracer.original("irecv"), self._group, self.rank,
                               self.probe_ring, self.s.link_probe_bytes)
            if probe is not None:
                held["own"][StepKey.LINK_IN_S] = probe
                record[StepKey.LINK_IN_S] = probe
        mine.append(probe)
        values = [_nan(v) for v in mine]
        if not (reduced and held["pipelined"]):
            held["reduced"] = True
            if reduced:
                record.update(self.cross_rank(values, step))
                self._feed_stragglers(step, {**record, **fields})
            return
        every = self._median_every()
        per_rank = bool(every) and step % every == 0  # every rank's values travel up too, in rank order
        payload = reduction_payload(values, self.rank) + ([values] if per_rank else [])
        held.update(fields=fields, per_rank=per_rank, reduced=self.rank != 0)  # rank 0's: once the tree is in
        for owner, got in self._pipeline.post(payload, per_rank, held):
            self._reduced(owner, got)

    def _reduced(self, held: dict, payload: list[list[float]]) -> None:
        """Rank 0: a step's values from every rank are in (a tree level per step: cross_rank.py)."""
        record = held["record"]
        record.update(cross_rank_figures(payload[:ROWS], payload[ROWS:] if held["per_rank"] else None, self.world,
                                         self._host_count()))
        held["reduced"] = True
        self._feed_stragglers(held["step"], {**record, **held["fields"]})

    def _feed_stragglers(self, step: int, fields: dict) -> None:
        if self.stragglers is not None:
            for finding in self.stragglers.feed(step, fields):
                print(f"[telemetry] {describe_straggler(finding)}", file=sys.stderr, flush=True)

    def _write(self, held: dict) -> None:
        """The step's rank line (and events); its record released to the metrics file."""
        if not held.get("own_written"):
            self._write_own(held)
        held["record"].update(held["own"])
        held["record"].pop("_held", None)

    def _write_own(self, held: dict) -> None:
        """The step's rank line and events: this rank's own fields, complete once its calls are."""
        if self._events is not None:
            self._write_events(held["step"], held["t_end"], held["comm"].calls, held["marks"], held["t_step"])
        self._write_rank_line({StepKey.STEP: held["step"], StepKey.STEP_TIME_S: held[StepKey.STEP_TIME_S],
                               **held["own"]})
        held["own_written"] = True

    def interval(self) -> dict:
        """Energy, mean power and NIC/RDMA counter deltas on this rank since the last call (or start): one
        record per size of the collective sweep. Unknown values are null with the reason."""
        if not self.started:
            return {StepKey.GPU_ENERGY_J: None, StepKey.GPU_POWER_W: None,
                    StepKey.GPU_ENERGY_REASON: "telemetry disabled"}
        gpu = self.gpu.step()
        out = {StepKey.GPU_ENERGY_J: _first(gpu["energy_j"]), StepKey.GPU_POWER_W: _first(gpu["power_w"])}
        if gpu.get("reason"):
            out[StepKey.GPU_ENERGY_REASON] = gpu["reason"]
        elif out[StepKey.GPU_POWER_W] is None:
            every = self.s.power_sample_interval_s
            out["gpu_power_reason"] = (f"no power sample in the interval (sampled every {every} s; hold each size "
                                       "longer with sweep.min_seconds_per_size)")
        self._add_gpu_energy(out[StepKey.GPU_ENERGY_J])
        if self.cpu is not None:
            cpu = self.cpu.step()
            out["cpu_energy_j"] = total_j(cpu["energy_j"])
            if cpu.get("reason"):
                out["cpu_energy_reason"] = cpu["reason"]
        if self.counters is not None:
            if not self._rdma_from_log:  # the sweep's first size built NCCL's communicator: its log names devices
                self._rdma_ports_from_nccl_log()
            self.counters.sample_now()  # the sweep's interval ends now: read every source here, off its timing
            deltas, _ = self.counters.take(None, time.perf_counter())
            self._loss_steps.append(deltas)
            out["counters"] = deltas
            out["congestion"] = congestion_figures(deltas)  # PFC, ECN, CNPs per sweep size
            out.update(tx_bytes=_sum_key(deltas, "net:", "tx_bytes"), rx_bytes=_sum_key(deltas, "net:", "rx_bytes"),
                       rdma_tx_bytes=_sum_key(deltas, "rdma:", "port_xmit_bytes"),
                       rdma_rx_bytes=_sum_key(deltas, "rdma:", "port_rcv_bytes"),
                       loss_events=sum(loss_verdict([deltas])["counts"].values()) if deltas else None)
        else:
            out["counters_reason"] = "read by the host's local rank 0"
        return out

    def start_eval(self, step: int) -> None:
        """An evaluation after `step`: its collectives are kept apart from every training step's."""
        if self.started:
            self.tracer.begin_step()
            self._t_eval = time.perf_counter()

    def end_eval(self, step: int) -> dict:
        """The evaluation's own communication: `eval_comm_bytes`, `eval_comm_time_s` (same rule as a step's)."""
        if not self.started or self._t_eval is None:
            return {}
        t_end = time.perf_counter()
        calls = self.tracer.end_step()  # released at once: an evaluation's record is not held
        comm = calls.summary()
        window = (self._t_eval, t_end)
        self._t_eval = None
        return {StepKey.EVAL_TIME_S: t_end - window[0], StepKey.EVAL_COMM_BYTES: totals(comm)[0],
                StepKey.EVAL_COMM_TIME_S: step_comm_times(calls.calls, [], window)[StepKey.COMM_TIME_S]}

    def _median_every(self) -> int:
        every = self.s.cross_rank_median_every
        if every is None:
            every = 1 if self.world <= MEDIAN_EVERY_STEP_UP_TO else MEDIAN_EVERY_AT_SCALE
        return every

    def cross_rank(self, mine: list[float], step: int) -> dict:
        """Reduce every rank's REDUCED values (NaN = unknown) to rank 0; collective over the side group.
        Returns rank 0's record fields, {} elsewhere."""
        payload = reduction_payload(mine, self.rank)
        every = self._median_every()
        median_step = bool(every) and step % every == 0
        if median_step:  # every rank's values travel up with the reduction, in rank order
            payload.append(list(mine))
        if self.world > 1:  # isend/irecv, not send/recv: torch's send calls the module's isend, which the tracer wraps
            payload = tree_reduce(payload, self.rank, self.world, self._group, self.tracer.original("isend"),
                                  self.tracer.original("irecv"))
        if payload is None:
            return {}
        return cross_rank_figures(payload[:ROWS], payload[ROWS:] if median_step else None, self.world,
                                  self._host_count())

    def _write_events(self, step: int, t_end: float, calls: list, marks: list, t_step: float | None) -> None:
        off = self._clock_offset
        kept = calls[:EVENTS_MAX_CALLS_PER_STEP]
        line = {"step": step, "rank": self.rank, "t0": None if t_step is None else t_step + off,
                "t1": t_end + off, "marks": [[n, t + off] for n, t in marks],
                # op, start (issue; NCCL: its placed device start), duration (null: untimed), bytes, group
                # size, source, group name
                "calls": [[c.op, (c.t_start if c.t_start is not None else c.t_issue) + off, c.duration_s, c.nbytes,
                           c.group_size, c.source, (c.group or {}).get("name")] for c in kept],
                "calls_dropped": len(calls) - len(kept)}
        text = json.dumps(line) + "\n"
        if self._events_bytes + len(text) > EVENTS_MAX_BYTES:
            self._events.write(json.dumps({"step": step, "truncated": f"events file reached {EVENTS_MAX_BYTES} "
                                           "bytes; later steps are not in it"}) + "\n")
            self._events.close()
            self._events = None
            return
        self._events_bytes += len(text)
        self._events.write(text)

    def _write_rank_line(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, default=_json_default) + "\n")
            self._file.flush()
            self.last_step_written = record.get(StepKey.STEP)

    # ------------------------------------------------------------ end

    def _add_gpu_energy(self, joules: float | None) -> None:
        """A step's (or sweep interval's) GPU energy into the run's total; an unknown one is counted apart."""
        total = self._energy_total
        total["intervals"] += 1
        if joules is None:
            total["unknown"] += 1
        else:
            total["gpu_j"] += joules
            total["known"] = True

    def _gpu_energy_total(self) -> tuple[float | None, str | None]:
        """The run's GPU energy and why it is null: a total over some intervals only is not the run's."""
        total = self._energy_total
        if self.gpu.reason is not None or not total["known"]:
            return None, self.gpu.reason
        if total["unknown"]:
            return None, (f"the GPU energy of {total['unknown']} of {total['intervals']} steps or intervals is unknown "
                          "(their records' gpu_energy_reason says why)")
        return total["gpu_j"], None

    def summary(self) -> dict:
        """What goes into run.json at the end: energy, loss verdict, exposed windows (this rank's view)."""
        if not self.started:
            return {"enabled": False}
        gpu_j, gpu_reason = self._gpu_energy_total()
        out = {"enabled": True, StepKey.GPU_ENERGY_J: gpu_j, StepKey.GPU_ENERGY_REASON: gpu_reason,
               "counters": loss_verdict(self._loss_steps) if self.counters is not None else
               {"verdict": None, "reason": "read by the host's local rank 0"}}
        if self.counters is not None:
            out["rdma_ports"] = self.rdma_ports
            out["counter_sampling"] = self.counters.describe()
        if self.counters is not None:  # whole-server power is a host figure, like the counters
            out["server_power"] = {**self._bmc_info,
                                   "energy_j": self._server["energy_j"] if self._server["known"] else None,
                                   "mean_w": (self._server["energy_j"] / self._server["seconds"]
                                              if self._server["known"] and self._server["seconds"] else None)}
            if self.bmc is not None and self.bmc.errors:
                out["server_power"]["failed_reads"] = self.bmc.errors
                out["server_power"]["last_error"] = self.bmc.last_error
        devices = self.gpu.describe().get("devices") if hasattr(self.gpu, "describe") else None
        if devices:  # which NVML device each CUDA device was read as (CUDA_VISIBLE_DEVICES remaps)
            out["gpu_energy_devices"] = devices
        if self.cross_rank_info:
            out["cross_rank"] = self.cross_rank_info
        if getattr(self, "_traced", True):
            out[StepKey.COMM_HEALTH] = self.run_health()
            out["comm_outside_steps"] = self.tracer.outside_steps()
        if self.stragglers is not None:
            out["stragglers"] = self.stragglers.summary()
        if self._exposed:
            out["exposed_windows"] = len(self._exposed)
            out["exposed_share_mean"] = statistics.mean(w["exposed_share"] for w in self._exposed)
        return out

    def carry_steps(self, records: list[dict]) -> None:
        """A resumed run's steps before its checkpoint (rank 0's metrics.jsonl lines): their tracer health is
        added to the run's and the straggler detector reads them, so run.json's `comm_health` and `stragglers`
        cover every step, not only this attempt's. The straggler check reads only steps of this world size:
        its findings name ranks and this attempt's hosts, which an earlier attempt's other layout does not share."""
        for r in records:
            if isinstance(r.get(StepKey.COMM_HEALTH), dict):
                coverage.add(self._health, r[StepKey.COMM_HEALTH])
            ranks = ((r.get(StepKey.RANKS) or {}).get("compute_s") or {}).get("ranks")
            if self.stragglers is not None and isinstance(r.get(StepKey.STEP), int) and ranks == self.world:
                self.stragglers.feed(r[StepKey.STEP], r)

    def run_health(self) -> dict:
        """The run's tracer health (telemetry/coverage.py): every step's counts added up, and the calls still
        waiting for a report now counted as never reported."""
        run = coverage.add(coverage.empty(), self._health)
        for kind, by_group in self.tracer.since_last_step().items():
            for name, n in by_group.items():
                coverage.add(run, {kind: n, "by_group": {name: {kind: n}}})
        for name, n in self.tracer.still_pending().items():
            coverage.add(run, {"never_reported": n, "by_group": {name: {"never_reported": n}}})
        return coverage.finish(run)

    def close(self, live: bool = True) -> None:
        """`live`: close the live exporter too (its last push marks the run finished); False for an owner that
        writes the run directory's last lines after this and closes it then (telemetry/integrations/recorder.py)."""
        if not self.started:
            return
        try:
            self.flush(collective=False)  # a step still held (a run that did not end through on_train_end)
        finally:  # a failed write of those lines still leaves no tracer installed, no meter running, no file open
            self.started = False
            if self._shared_tracer:  # modules bound its wrappers at import: it stays, holding none of this run's calls
                self.tracer.next_run()
            elif getattr(self, "_traced", True):
                self.tracer.uninstall()
            self.gpu.close()
            if self.cpu is not None:
                self.cpu.close()
            if self.counters is not None:
                self.counters.close()
            if self.bmc is not None:
                self.bmc.close()
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._events is not None:
                self._events.close()
                self._events = None
        if live:  # the last lines pushed (the other local ranks' too), the run marked finished
            live_export.close_exporter(self.last_step_written, live_export.final_wait_s(self.s.hold_reports_s))
        if self.s.export and self.run_dir:
            self._wait_for_ranks()

    def _wait_for_ranks(self) -> None:
        """Every rank has closed its files before rank 0 exports them. The exports themselves are analysis
        (telemetry.analysis.exports.export_after_close), called by whoever owns the run after close()."""
        if self._group is not None:
            try:
                with harness_traffic():  # monitored_barrier is traced: this wait is the harness's, not the job's
                    dist.monitored_barrier(group=self._group, timeout=datetime.timedelta(seconds=EXPORT_BARRIER_S))
            except RuntimeError:  # a rank that died: export what is on disk
                pass


def _first(d):
    if not d:
        return None
    return next(iter(d.values()))


def _sum_key(deltas: dict, prefix: str, key: str):
    vals = [v[key] for dev, v in deltas.items() if dev.startswith(prefix) and key in v]
    return sum(vals) if vals else None


def _json_default(obj):
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)
