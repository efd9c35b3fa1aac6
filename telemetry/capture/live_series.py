"""The run's live series: what a node's ranks recorded, as Prometheus metric families.

Read, never told: each rank already appends one flushed line per step to ranks/rankNNNNN.telemetry.jsonl,
and rank 0 one to metrics.jsonl (telemetry/rundir.py owns both), or, in a collective sweep, one per size
to sweep.jsonl. `RunSeries` follows those files from
where they stood when it was made: at each scrape (or push) it reads the lines added since the last one,
adds them to its counters and keeps the newest line of each rank for the gauges. So no rank does any work
for the exporter during its step, and no rank waits for a scrape; a scrape costs the reading of the new
lines (bench/live_exporter.py).

Names follow Prometheus' conventions: base units (seconds, bytes, joules, watts), `_total` counters summed
over the steps since the exporter started, and `fabric_harness_step_*` gauges holding the newest step's
value. Labels are bounded: `job`, `run`, `host` on every series, `rank` on a rank's own, `group` (a process
group's name: dp, tp, pp, ...), `scope` (intra, inter, unknown) and `op` (the collective type) on
communication, `device` on NIC/RDMA counters. An unknown value (a null in the files) is no sample, never 0.
`SERIES` below is the list (docs/live.md shows it); pure Python, no torch.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from telemetry import coverage
from telemetry.capture.congestion import classify
from telemetry.capture.counters import LOSS_COUNTERS
from telemetry.rundir import METRICS, RANK_TELEMETRY, SWEEP_SIZES, JsonlFollower, StepKey, rank_file

PREFIX = "fabric_harness_"
RANK, COMM, HOST, JOB = ("rank",), ("rank", "group", "scope", "op"), (), ()
SWEEP, SWEEP_PLACED = ("op",), ("op", "placement")  # placement: out_of_place, in_place (nccl-tests' two blocks)
PLACEMENTS = ("out_of_place", "in_place")


@dataclass(frozen=True)
class Series:
    name: str  # without the prefix; counters without _total (prometheus-client appends it)
    kind: str  # "gauge" or "counter"
    labels: tuple[str, ...]  # besides job, run, host
    help: str


SERIES: tuple[Series, ...] = (
    # ---- per rank, from ranks/rankNNNNN.telemetry.jsonl
    Series("step", "gauge", RANK, "the newest optimizer step the rank recorded"),
    Series("step_seconds", "gauge", RANK, "the newest step's wall time on the rank, data to optimizer"),
    Series("step_compute_seconds", "gauge", RANK, "the newest step's time outside collectives (step time less "
           "communication time); absent when some collective went untimed"),
    Series("step_comm_seconds", "gauge", RANK, "the newest step's time with at least one collective in flight"),
    Series("step_exposed_comm_seconds", "gauge", RANK, "the newest step's communication time the training thread "
           "waited for"),
    Series("steps", "counter", RANK, "steps the rank recorded since the exporter started"),
    Series("train_seconds", "counter", RANK, "sum of the rank's step times"),
    Series("compute_seconds", "counter", RANK, "sum of the rank's time outside collectives"),
    Series("comm_seconds", "counter", RANK, "sum of the rank's time with a collective in flight"),
    Series("exposed_comm_seconds", "counter", RANK, "sum of the rank's exposed communication time"),
    Series("step_collective_seconds", "gauge", COMM, "the newest step's summed call durations of this collective "
           "type in this process group; absent when none was timed"),
    Series("step_collective_bytes", "gauge", COMM, "the newest step's bytes of this collective type in this group "
           "(nccl-tests' S)"),
    Series("step_collective_calls", "gauge", COMM, "the newest step's calls of this collective type in this group"),
    Series("step_collective_untimed_calls", "gauge", COMM, "the newest step's calls without a duration"),
    Series("collective_busbw_bytes_per_second", "gauge", COMM, "the newest step's bus bandwidth of this type in "
           "this group, at the group's size (nccl-tests' busbw)"),
    Series("collective_seconds", "counter", COMM, "summed durations of the timed calls"),
    Series("collective_bytes", "counter", COMM, "bytes of every call, timed or not"),
    Series("collective_calls", "counter", COMM, "calls"),
    Series("collective_untimed_calls", "counter", COMM, "calls without a duration (timing coverage: 1 - untimed / "
           "calls)"),
    Series("collective_untimed_bytes", "counter", COMM, "bytes of the calls without a duration"),
    Series("tracer_calls", "counter", ("rank", "group", "outcome"), "the collective tracer's health (a step "
           "record's `comm_health`), per process group: calls timed (outcome timed) and, for the rest, why they "
           "have no time (late, no_duration, captured, compiled, no_timing, other_untimed); the outcomes "
           "partition the calls, so sum() over outcome is every call seen (telemetry/coverage.py)"),
    Series("tracer_bytes", "counter", ("rank", "group", "outcome"), "bytes of the calls the tracer saw, per "
           "process group: timed and untimed (sum() over outcome is every byte seen)"),
    Series("tracer_events", "counter", ("rank", "group", "kind"), "what the tracer met between steps, per process "
           "group: reported_after_close, never_reported, unclaimed_reports, queue_full (not calls of a step: "
           "never add them to tracer_calls)"),
    Series("gpu_power_watts", "gauge", RANK, "the rank's GPU mean power over the newest step (NVML)"),
    Series("gpu_energy_joules", "counter", RANK, "the rank's GPU energy (NVML counter deltas)"),
    # ---- per host, from its local rank 0's line (host-wide sources are read once per host)
    Series("cpu_energy_joules", "counter", HOST, "CPU package energy of the host (RAPL)"),
    Series("server_power_watts", "gauge", HOST, "whole-server power from the host's BMC over the newest step"),
    Series("server_energy_joules", "counter", HOST, "whole-server energy from the host's BMC"),
    Series("nic_transmit_bytes", "counter", ("device",), "bytes sent by the NIC (interfaces in use)"),
    Series("nic_receive_bytes", "counter", ("device",), "bytes received by the NIC"),
    Series("rdma_transmit_bytes", "counter", ("device",), "RDMA port data sent (port_xmit_data x 4, EFA tx_bytes)"),
    Series("rdma_receive_bytes", "counter", ("device",), "RDMA port data received"),
    Series("nic_loss_events", "counter", ("device", "counter"), "drop, discard, error and retransmission counters' "
           "growth, by the counter's name"),
    Series("pfc_pause_frames", "counter", ("direction", "priority"), "PFC pause frames (ethtool -S), by direction "
           "and priority (global: link-level pause)"),
    Series("ecn_marked_packets", "counter", HOST, "packets marked ECN-CE"),
    Series("cnp_sent", "counter", HOST, "RoCE congestion notification packets sent"),
    Series("cnp_received", "counter", HOST, "RoCE congestion notification packets received"),
    # ---- the job, from metrics.jsonl (served by the node of rank 0)
    Series("loss", "gauge", JOB, "the newest step's training loss"),
    Series("learning_rate", "gauge", JOB, "the newest step's learning rate"),
    Series("tokens_per_second", "gauge", JOB, "the newest step's non-padding tokens / step time, whole job"),
    Series("samples_per_second", "gauge", JOB, "the newest step's global batch / step time"),
    Series("mfu_ratio", "gauge", JOB, "model FLOPs utilisation of the newest step (0-1); absent off-GPU"),
    Series("device_flops_per_second", "gauge", JOB, "model FLOP/s per device of the newest step"),
    Series("tokens", "counter", JOB, "non-padding tokens trained"),
    Series("job_gpu_power_watts", "gauge", JOB, "every GPU of the job, summed, over the newest step"),
    Series("job_steps", "counter", JOB, "optimizer steps of the job (rank 0's metrics lines)"),
    Series("run_finished", "gauge", JOB, "1 once the run closed (pushed at the end; the group then stays until "
           "deleted)"),
    # ---- a collective sweep (a job without steps), from sweep.jsonl (served by the node of rank 0)
    Series("sweep_size_bytes", "gauge", SWEEP, "the newest size the sweep measured in this test (nccl-tests' size "
           "column; op: the test as collectives.json names it, the collective or sendrecv_intra_node, "
           "sendrecv_inter_node for a pair test)"),
    Series("sweep_time_seconds", "gauge", SWEEP_PLACED, "that size's time per operation (nccl-tests' time), "
           "out-of-place and in-place"),
    Series("sweep_algbw_bytes_per_second", "gauge", SWEEP_PLACED, "that size's algorithm bandwidth (nccl-tests' "
           "algbw)"),
    Series("sweep_busbw_bytes_per_second", "gauge", SWEEP_PLACED, "that size's bus bandwidth (nccl-tests' busbw)"),
    Series("sweep_sizes", "counter", SWEEP, "sizes the sweep measured in this test"),
    Series("sweep_sizes_planned", "gauge", SWEEP, "sizes each test of the sweep measures (from sweep.min_bytes, "
           "max_bytes and factor or step_bytes): progress is sweep_sizes_total / this"),
    Series("sweep_wrong_elements", "counter", SWEEP, "elements that failed the sweep's check (nccl-tests' #wrong), "
           "both placements; absent when the check is off"),
    Series("sweep_gpu_power_watts", "gauge", SWEEP, "every GPU of the job, summed, over the newest size (NVML)"),
    Series("sweep_gpu_energy_joules", "counter", SWEEP, "every GPU's energy over this test's sizes whose energy "
           "every rank read (NVML); a size with one rank's unknown adds nothing: compare with sweep_sizes_total"),
)
BY_NAME = {s.name: s for s in SERIES}
PFC_KINDS = {"rx_pause": "rx", "tx_pause": "tx", "rx_pause_global": "rx", "tx_pause_global": "tx"}
# a record's `comm_health` counts (telemetry/coverage.py): outcome label -> key. Only outcomes that partition
# the calls (timed + each untimed reason = calls), so a sum over the label counts each call once.
HEALTH_CALLS = {"timed": "timed", **{k: k for k in coverage.UNTIMED}}
HEALTH_EVENTS = coverage.BETWEEN


def identity(run_dir: str, environ=os.environ) -> dict:
    """`job`: the scheduler's job (SLURM_JOB_ID, a Kubernetes job's name in FABRIC_HARNESS_JOB or JOB_NAME,
    torchrun's --rdzv-id) or else the run's name; `run`: the run directory's name; `host`: this host."""
    run = os.path.basename(os.path.normpath(run_dir))
    job = (environ.get("FABRIC_HARNESS_JOB") or environ.get("SLURM_JOB_ID") or environ.get("JOB_NAME")
           or (environ.get("TORCHELASTIC_RUN_ID") if environ.get("TORCHELASTIC_RUN_ID") not in (None, "", "none")
               else None) or run)
    # the host name every rank reports (telemetry/capture/environment.py; the fabric lab names its nodes)
    return {"job": str(job), "run": run, "host": environ.get("FABRIC_HARNESS_NODE") or socket.gethostname()}


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if v == v and abs(v) != float("inf") else None


class RunSeries:
    """A node's series: its ranks' files (and metrics.jsonl when rank 0 runs here), followed from now on.
    A prometheus-client collector (`collect`), also read by the pushers."""

    def __init__(self, run_dir: str, ranks: list[int], ident: dict, job_metrics: bool):
        self.run_dir, self.ident = run_dir, ident
        self._lock = threading.Lock()  # scrapes run in the HTTP server's threads, pushes in their own
        self._tails: dict[int, JsonlFollower] = {}
        self.ranks: list[int] = []
        self.set_ranks(ranks)
        self._job = JsonlFollower(os.path.join(run_dir, METRICS), from_end=True) if job_metrics else None
        # a resume rewrites metrics.jsonl with an earlier attempt's steps up to its checkpoint after this opened:
        # the follower reads the new file whole, and its lines stamped before now are not this run's to count
        self._since = time.time()
        # a sweep's sizes from now on: the exporter opens before the sweep writes its first size, and a sweep.jsonl
        # already there is an earlier attempt's (a rerun moves it to logs/ before its first size: the follower
        # then reads the new file whole); the end rewrites the file with the same lines: each (test, size) is
        # counted once
        self._sweep = JsonlFollower(os.path.join(run_dir, SWEEP_SIZES), from_end=True) if job_metrics else None
        self._sweep_seen: set[tuple] = set()
        self._latest_size: dict[str, dict] = {}  # test -> its newest size's line
        self._latest: dict[int, dict] = {}
        self._latest_job: dict | None = None
        self._counters: dict[tuple[str, tuple], float] = {}
        self.finished = False

    def set_ranks(self, ranks: list[int]) -> None:
        """The ranks this node serves (refined once every rank's host is known)."""
        with self._lock:
            for r in ranks:
                if r not in self._tails:
                    self._tails[r] = JsonlFollower(os.path.join(self.run_dir, rank_file(r, RANK_TELEMETRY)),
                                           from_end=True)
            self.ranks = sorted(ranks)

    # ------------------------------------------------------------ reading
    def _add(self, name: str, labels: tuple, value) -> None:
        v = _num(value)
        if v is not None:
            key = (name, labels)
            self._counters[key] = self._counters.get(key, 0.0) + v

    def _fold_rank(self, rank: int, line: dict) -> None:
        r = str(rank)
        self._add("steps", (r,), 1)
        step_time, comm_time = _num(line.get(StepKey.STEP_TIME_S)), _num(line.get(StepKey.COMM_TIME_S))
        self._add("train_seconds", (r,), step_time)
        self._add("comm_seconds", (r,), comm_time)
        self._add("exposed_comm_seconds", (r,), line.get(StepKey.EXPOSED_COMM_S))
        self._add("compute_seconds", (r,), _compute(line))
        for group, g in (line.get(StepKey.COMM_GROUPS) or {}).items():
            scope = g.get("scope") or "unknown"
            for op, c in (g.get("by_op") or {}).items():
                key = (r, str(group), scope, str(op))
                self._add("collective_seconds", key, c.get("time_s"))
                self._add("collective_bytes", key, c.get("bytes"))
                self._add("collective_calls", key, c.get("count"))
                self._add("collective_untimed_calls", key, c.get("untimed"))
                self._add("collective_untimed_bytes", key, c.get("untimed_bytes"))
        health = line.get(StepKey.COMM_HEALTH)
        if isinstance(health, dict):
            # per process group only: a synthetic group for the totals could collide with a real group's name
            for group, h in (health.get("by_group") or {}).items():
                h, key = h or {}, (r, str(group))
                for outcome, k in HEALTH_CALLS.items():
                    self._add("tracer_calls", (*key, outcome), h.get(k))
                timed_bytes, all_bytes = _num(h.get("timed_bytes")), _num(h.get("bytes"))
                self._add("tracer_bytes", (*key, "timed"), timed_bytes)
                if all_bytes is not None:
                    self._add("tracer_bytes", (*key, "untimed"), max(0.0, all_bytes - (timed_bytes or 0.0)))
                for kind in HEALTH_EVENTS:
                    self._add("tracer_events", (*key, kind), h.get(kind))
        self._add("gpu_energy_joules", (r,), line.get(StepKey.GPU_ENERGY_J))
        host = line.get(StepKey.HOST)
        if isinstance(host, dict):
            self._fold_host(host)

    def _fold_host(self, host: dict) -> None:
        self._add("cpu_energy_joules", (), host.get("cpu_energy_j"))
        server = host.get("server_power") or {}
        self._add("server_energy_joules", (), server.get("energy_j"))
        for dev, values in (host.get("counters") or {}).items():
            kind, _, name = str(dev).partition(":")
            for counter, v in (values or {}).items():
                if kind == "net" and counter in ("tx_bytes", "rx_bytes"):
                    self._add("nic_transmit_bytes" if counter == "tx_bytes" else "nic_receive_bytes", (name,), v)
                elif kind == "rdma" and counter in ("port_xmit_bytes", "port_rcv_bytes"):
                    self._add("rdma_transmit_bytes" if counter == "port_xmit_bytes" else "rdma_receive_bytes",
                              (name,), v)
                if _is_loss(counter):
                    self._add("nic_loss_events", (name, counter), v)
        cong = host.get("congestion") or {}
        for kind, by_prio in (cong.get("pfc") or {}).items():
            if kind in PFC_KINDS:
                for prio, n in (by_prio or {}).items():
                    self._add("pfc_pause_frames", (PFC_KINDS[kind], str(prio).removeprefix("prio")), n)
        self._add("ecn_marked_packets", (), cong.get("ecn_marked"))
        self._add("cnp_sent", (), cong.get("cnp_sent"))
        self._add("cnp_received", (), cong.get("cnp_received"))

    def _fold_job(self, line: dict) -> None:
        self._add("job_steps", (), 1)
        self._add("tokens", (), line.get(StepKey.TOKENS))

    def _fold_size(self, line: dict) -> None:
        op, size = line.get("op"), _num(line.get("size"))
        if not isinstance(op, str) or size is None:
            return
        key = (op, size, line.get("requested_bytes"))
        if key in self._sweep_seen:
            return
        self._sweep_seen.add(key)
        self._add("sweep_sizes", (op,), 1)
        wrong = [_num((line.get(p) or {}).get("wrong")) for p in PLACEMENTS if isinstance(line.get(p), dict)]
        if any(w is not None for w in wrong):
            self._add("sweep_wrong_elements", (op,), sum(w for w in wrong if w is not None))
        ranks = line.get("ranks") if isinstance(line.get("ranks"), list) else []
        # (a sweep's size line holds the step record's GPU keys: each rank's, and their sum)
        if ranks and all(_num((r or {}).get(StepKey.GPU_ENERGY_J)) is not None for r in ranks):  # partial: no total
            self._add("sweep_gpu_energy_joules", (op,), line.get(StepKey.GPU_ENERGY_J))
        self._latest_size[op] = line

    def refresh(self) -> None:
        """Read what the ranks appended since the last call."""
        with self._lock:
            for rank, tail in self._tails.items():
                if rank not in self.ranks:
                    continue
                for line in tail.new():
                    self._fold_rank(rank, line)
                    self._latest[rank] = line
            if self._job is not None:
                for line in self._job.new():
                    if self._job.replaced and (_num(line.get(StepKey.TIME)) or self._since) < self._since:
                        continue
                    self._fold_job(line)
                    self._latest_job = line
            if self._sweep is not None:
                for line in self._sweep.new():
                    self._fold_size(line)

    def last_steps(self) -> dict[int, int]:
        """{served rank: the step of its newest line read, -1 when none yet}."""
        with self._lock:
            steps = {r: _num((self._latest.get(r) or {}).get("step")) for r in self.ranks}
        return {r: -1 if v is None else int(v) for r, v in steps.items()}

    # ------------------------------------------------------------ the families
    def samples(self) -> dict[str, list[tuple[tuple, float]]]:
        """{series name: [(label values besides job/run/host, value)]}: the current values, no I/O."""
        out: dict[str, list] = {s.name: [] for s in SERIES}
        with self._lock:
            for (name, labels), v in self._counters.items():
                out[name].append((labels, v))
            for rank, line in sorted(self._latest.items()):
                r = (str(rank),)
                for name, value in (("step", line.get(StepKey.STEP)), ("step_seconds", line.get(StepKey.STEP_TIME_S)),
                                    ("step_compute_seconds", _compute(line)),
                                    ("step_comm_seconds", line.get(StepKey.COMM_TIME_S)),
                                    ("step_exposed_comm_seconds", line.get(StepKey.EXPOSED_COMM_S)),
                                    ("gpu_power_watts", line.get(StepKey.GPU_POWER_W))):
                    if _num(value) is not None:
                        out[name].append((r, _num(value)))
                for group, g in (line.get(StepKey.COMM_GROUPS) or {}).items():
                    scope = g.get("scope") or "unknown"
                    for op, c in (g.get("by_op") or {}).items():
                        key = (*r, str(group), scope, str(op))
                        busbw = _num(c.get("busbw_GBps"))
                        for name, value in (("step_collective_seconds", c.get("time_s")),
                                            ("step_collective_bytes", c.get("bytes")),
                                            ("step_collective_calls", c.get("count")),
                                            ("step_collective_untimed_calls", c.get("untimed")),
                                            ("collective_busbw_bytes_per_second",
                                             busbw * 1e9 if busbw is not None else None)):
                            if _num(value) is not None:
                                out[name].append((key, _num(value)))
                host = line.get(StepKey.HOST)
                server = (host.get("server_power") or {}) if isinstance(host, dict) else {}
                if _num(server.get("watts")) is not None:
                    out["server_power_watts"].append(((), _num(server["watts"])))
            job = self._latest_job or {}
            for name, key, scale in (("loss", "loss", 1), ("learning_rate", "lr", 1),
                                     ("tokens_per_second", StepKey.TOKENS_PER_S, 1),
                                     ("samples_per_second", StepKey.SAMPLES_PER_S, 1), ("mfu_ratio", "mfu", 1),
                                     ("device_flops_per_second", StepKey.TFLOPS_PER_DEVICE, 1e12),
                                     ("job_gpu_power_watts", StepKey.JOB_GPU_POWER_W, 1)):
                if _num(job.get(key)) is not None:
                    out[name].append(((), _num(job[key]) * scale))
            self._size_samples(out)
            if self.finished:
                out["run_finished"].append(((), 1.0))
        return out

    def _size_samples(self, out: dict) -> None:
        """The gauges of each test's newest size (under the lock)."""
        for op, line in self._latest_size.items():
            for name, value in (("sweep_size_bytes", line.get("size")),
                                ("sweep_sizes_planned", line.get("sizes_planned")),
                                ("sweep_gpu_power_watts", _whole_sum(line.get(StepKey.GPU_POWER_W)))):
                if _num(value) is not None:
                    out[name].append(((op,), _num(value)))
            for placement in PLACEMENTS:
                block = line.get(placement)
                if not isinstance(block, dict):
                    continue
                for name, key, scale in (("sweep_time_seconds", "time_us", 1e-6),
                                         ("sweep_algbw_bytes_per_second", "algbw_GBps", 1e9),
                                         ("sweep_busbw_bytes_per_second", "busbw_GBps", 1e9)):
                    if _num(block.get(key)) is not None:
                        out[name].append(((op, placement), _num(block[key]) * scale))

    def families(self) -> list:
        base_names, base = ("job", "run", "host"), (self.ident["job"], self.ident["run"], self.ident["host"])
        fams = []
        for name, rows in self.samples().items():
            if not rows:
                continue
            s = BY_NAME[name]
            cls = CounterMetricFamily if s.kind == "counter" else GaugeMetricFamily
            fam = cls(PREFIX + name, s.help, labels=(*base_names, *s.labels))
            for labels, v in sorted(rows):
                fam.add_metric((*base, *labels), v)
            fams.append(fam)
        return fams

    def collect(self):
        """prometheus-client's Collector interface: read the new lines, then yield the families."""
        self.refresh()
        yield from self.families()

    def describe(self):
        return []  # families vary with what the run records: no describe-time checks on registration


def _whole_sum(values) -> float | None:
    """The sum of every rank's value, unknown when any rank's is (a partial sum is no job total)."""
    if not isinstance(values, list) or not values or any(_num(v) is None for v in values):
        return None
    return sum(_num(v) for v in values)


def _is_loss(counter: str) -> bool:
    """A drop, discard, error or retransmission counter, as the run's loss verdict counts them."""
    return counter in LOSS_COUNTERS or (classify(counter) or (None,))[0] == "loss"


def _compute(line: dict) -> float | None:
    """Step time outside collectives, as telemetry/capture/session.py reduces it: unknown when a collective
    of the step went untimed."""
    step, comm = _num(line.get(StepKey.STEP_TIME_S)), _num(line.get(StepKey.COMM_TIME_S))
    if step is None:
        return None
    if comm is None:
        return step if not line.get(StepKey.COMM) else None
    return step - comm
