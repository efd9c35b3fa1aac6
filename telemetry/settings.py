"""Telemetry's settings: the recipe's `telemetry:` section and the library's constructor argument, defined
once (trainer/config.py binds recipes into this class). Pure Python, no torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

EXPORT_KINDS = ("tensorboard", "wandb", "parquet", "trace")  # written by telemetry/analysis/exports


@dataclass
class TelemetrySettings:
    enabled: bool = True
    nccl_debug: bool = True  # NCCL_DEBUG=INFO into the run's logs/ (for the transport verdict)
    # adds TUNING to NCCL_DEBUG_SUBSYS: rank 0 of each communicator logs the algorithm and protocol of every
    # collective it launches (one line per call: the collective sweep turns it on; long training runs pay in log size)
    nccl_tuning: bool = False
    cross_rank_every: int = 1  # steps between cross-rank reductions to rank 0; 0 = never
    # steps between exact medians across ranks (every rank's values go to rank 0); None: every cross-rank step up to
    # MEDIAN_EVERY_STEP_UP_TO ranks, every MEDIAN_EVERY_AT_SCALE steps above; 0 = never
    cross_rank_median_every: int | None = None
    # the reduction up its tree a level per step (telemetry/capture/cross_rank.py), so no step end waits for a
    # peer's current step: saves ceil(log2 N) message latencies per step on rank 0's critical path at scale; rank 0's
    # metrics lines then follow ceil(log2 N) steps late, and a rank 0 killed outright loses those lines
    cross_rank_pipelined: bool = False
    profile_every: int = 0  # steps between profiled windows (exposed communication); 0 = never
    profile_steps: int = 1
    save_traces: bool = False
    power_sample_interval_s: float = 0.1
    interfaces: list[str] | None = None  # NICs to count; default: the ones the backend uses
    sysfs: str = "/sys"  # where the NIC and RDMA counters are read (a host's /sys mounted elsewhere in a container)
    # written by rank 0 after close from the run directory (telemetry/analysis/exports); "trace" also makes every rank
    # keep ranks/rank<r>.events.jsonl (per-call timestamps, bounded: see EVENTS_MAX_*)
    export: list[str] = field(default_factory=list)
    link_probe_every: int = 5  # steps between link probes between hosts (telemetry/stragglers.py); 0 = never
    link_probe_bytes: int = 64 << 10
    # whole-server power from each host's BMC (telemetry/capture/bmc_power.py): "ipmitool" (each node's local
    # BMC), a Redfish address template with {host} (https://{host}-bmc), a {host: address} map, one address
    # (one BMC: read by the first host only), or None. Credentials: FABRIC_HARNESS_BMC_USER /
    # FABRIC_HARNESS_BMC_PASSWORD, never here
    bmc: str | dict | None = None
    bmc_chassis: str | None = None  # Redfish chassis Id; None: the first one the BMC lists with a power reading
    bmc_sample_interval_s: float = 1.0
    ethtool: bool = True  # PFC pause and port discard counters from ethtool -S (telemetry/capture/congestion.py)
    # seconds between samples of the NIC/RDMA counters, taken by sampler threads off the step path
    # (telemetry/capture/counter_sampler.py); each ethtool interface is read back to back at most this often
    counter_sample_interval_s: float = 0.1
    # switch counters: a Prometheus text endpoint (http://...) read before and after the run (rank 0); deltas in run.json
    switch_metrics_url: str | None = None
    # NCCL: seconds a step's communication fields may wait for the watchdog's late completion reports
    # (completed at a later step's end, never by waiting in the step); 0 = never hold
    hold_reports_s: float = 2.0
    # live series (telemetry/capture/live_export.py, docs/live.md): served by each node's local rank 0 in the
    # Prometheus text format on this port ("auto": a free one, written to logs/prometheus-targets.HOST.json);
    # None: off
    prometheus: int | str | None = None
    # what a recipe may write where its type alone reads vaguely ("expected an integer or a string or null")
    ALLOWED: ClassVar[dict] = {"prometheus": "a TCP port 1-65535, auto (a free port), or null (off)"}
    # a directory Prometheus' file_sd watches (shared by jobs): each node also writes its target list there
    prometheus_targets_dir: str | None = None
    pushgateway: str | None = None  # a Prometheus Pushgateway address (http://gw:9091); None: no push
    otlp: str | None = None  # an OTLP/HTTP metrics endpoint (http://collector:4318/v1/metrics); None: no push
    push_interval_s: float = 15.0  # seconds between pushes
