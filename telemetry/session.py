"""The telemetry library's one object: `start_step()` / `end_step()` around each optimizer step.

    tel = Telemetry(TelemetrySettings(), run_dir="runs/x")   # after init_process_group
    tel.start()
    for step in ...:
        tel.start_step(step)
        ... train ...
        record = tel.end_step(step, step_time_s)   # a dict of fields for this step (rank 0: cross-rank too)
    tel.close()

Every rank appends its own values to ranks/rank<r>.telemetry.jsonl; rank 0's records also carry
min/median/max across ranks, gathered over a separate gloo group with the unwrapped all_gather so the
telemetry's own traffic is never counted as the job's.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from . import fabric
from .collectives import CollectiveTracer, enable_nccl_timing, totals
from .counters import CounterReader, loss_verdict
from .energy import EnergyMeter, open_cpu_source, open_gpu_source
from .exposed import ProfiledWindows
from .formulas import OPS


@dataclass
class TelemetrySettings:
    enabled: bool = True
    nccl_debug: bool = True  # NCCL_DEBUG=INFO into the run's logs/ (for the transport verdict)
    cross_rank_every: int = 1  # steps between cross-rank gathers; 0 = never
    profile_every: int = 0  # steps between profiled windows (exposed communication); 0 = never
    profile_steps: int = 1
    save_traces: bool = False
    power_sample_interval_s: float = 0.1
    interfaces: list[str] | None = None  # NICs to count; default: the ones the backend uses
    sysfs: str = "/sys"


# The per-rank vector gathered to rank 0 each step; NaN stands for "unknown".
GATHERED = ("step_time_s", "comm_time_s", "comm_bytes", *(f"time_{op}" for op in OPS), "gpu_energy_j",
            "gpu_power_w", "host_cpu_energy_j", "host_net_tx_bytes", "host_net_rx_bytes", "host_rdma_tx_bytes",
            "host_rdma_rx_bytes", "host_loss_events")


def _nan(v) -> float:
    return float("nan") if v is None else float(v)


def _spread(values: list[float]) -> dict | None:
    known = [(v, r) for r, v in enumerate(values) if not math.isnan(v)]
    if not known:
        return None
    vs = [v for v, _ in known]
    return {"min": min(vs), "median": statistics.median(vs), "max": max(vs),
            "max_rank": max(known)[1], "ranks": len(vs)}


def _sum_known(values: list[float]) -> float | None:
    known = [v for v in values if not math.isnan(v)]
    return sum(known) if known else None


class Telemetry:
    def __init__(self, settings: TelemetrySettings | None = None, run_dir: str | None = None,
                 device: torch.device | None = None, nvml=None):
        self.s = settings or TelemetrySettings()
        self.run_dir = run_dir
        self.device = device or torch.device("cpu")
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world = dist.get_world_size() if dist.is_initialized() else 1
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.tracer = CollectiveTracer()
        self._nvml = nvml
        self._file = None
        self._group = None
        self._loss_steps: list[dict] = []
        self._energy_total = {"gpu_j": 0.0, "cpu_j": 0.0, "known": False}
        self._exposed: list[dict] = []
        self._t_step = None
        self.started = False

    # ------------------------------------------------------------ before the process group

    @staticmethod
    def prepare_environment(settings: TelemetrySettings, run_dir: str | None, backend: str) -> dict:
        """Environment that must be set before init_process_group (NCCL reads it once)."""
        applied = {}
        if settings.enabled and backend == "nccl":
            enable_nccl_timing()
            if settings.nccl_debug and run_dir:
                os.makedirs(os.path.join(run_dir, "logs"), exist_ok=True)
                applied = fabric.configure_nccl_logging(os.path.join(run_dir, "logs"))
        return applied

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        if not self.s.enabled or self.started:
            return
        self.tracer.install()
        on_gpu = self.device.type == "cuda"
        self.gpu = EnergyMeter(open_gpu_source(self.device.index if on_gpu else None, nvml=self._nvml),
                               self.s.power_sample_interval_s)
        host_leader = self.local_rank == 0  # host-wide sources are read once per host
        self.cpu = EnergyMeter(open_cpu_source(self.s.sysfs)) if host_leader else None
        self.counters = CounterReader(self._interfaces(), root=self.s.sysfs) if host_leader else None
        trace_dir = os.path.join(self.run_dir, "logs") if self.run_dir and self.s.save_traces else None
        self.windows = ProfiledWindows(self.s.profile_every, self.s.profile_steps, on_gpu, trace_dir, self.rank)
        if dist.is_initialized() and self.world > 1 and self.s.cross_rank_every:
            self._group = dist.new_group(backend="gloo")  # CPU-side, off the training streams
        if self.run_dir:
            ranks = os.path.join(self.run_dir, "ranks")
            os.makedirs(ranks, exist_ok=True)
            self._file = open(os.path.join(ranks, f"rank{self.rank:05d}.telemetry.jsonl"), "a", encoding="utf-8")
        self.started = True

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
        self._t_step = time.perf_counter()

    def end_step(self, step: int, step_time_s: float | None = None) -> dict:
        """This step's telemetry fields (call on every rank: the cross-rank gather is collective)."""
        if not self.started:
            return {}
        if step_time_s is None and self._t_step is not None:
            step_time_s = time.perf_counter() - self._t_step
        comm = self.tracer.end_step().summary()
        comm_bytes, comm_time = totals(comm)
        record = {"comm": comm, "comm_bytes": comm_bytes, "comm_time_s": comm_time}
        profiled = self.windows.active()
        exposed = self.windows.stop(step)
        if profiled:
            record["profiled"] = True
        if exposed is not None:
            record["exposed"] = exposed
            self._exposed.append(exposed)
        gpu = self.gpu.step()
        gpu_j = _first(gpu["energy_j"])
        gpu_w = _first(gpu["power_w"])
        record["gpu_energy_j"], record["gpu_power_w"] = gpu_j, gpu_w
        if gpu.get("reason"):
            record["gpu_energy_reason"] = gpu["reason"]
        host = {"cpu_j": None, "tx": None, "rx": None, "rdma_tx": None, "rdma_rx": None, "loss": None}
        if self.cpu is not None:
            cpu = self.cpu.step()
            host["cpu_j"] = _sum(cpu["energy_j"])
            record["host"] = {"cpu_energy_j": host["cpu_j"]}
            if cpu.get("reason"):
                record["host"]["cpu_energy_reason"] = cpu["reason"]
        if self.counters is not None:
            deltas = self.counters.delta()
            self._loss_steps.append(deltas)
            verdict = loss_verdict([deltas])
            host.update(tx=_sum_key(deltas, "net:", "tx_bytes"), rx=_sum_key(deltas, "net:", "rx_bytes"),
                        rdma_tx=_sum_key(deltas, "rdma:", "port_xmit_bytes"),
                        rdma_rx=_sum_key(deltas, "rdma:", "port_rcv_bytes"),
                        loss=sum(verdict["counts"].values()) if deltas else None)
            record.setdefault("host", {})["counters"] = deltas
        if gpu_j is not None:
            self._energy_total["gpu_j"] += gpu_j
            self._energy_total["known"] = True
        if host["cpu_j"] is not None:
            self._energy_total["cpu_j"] += host["cpu_j"]
        mine = [step_time_s, comm_time, comm_bytes, *(comm.get(op, {}).get("time_s") for op in OPS), gpu_j, gpu_w,
                host["cpu_j"], host["tx"], host["rx"], host["rdma_tx"], host["rdma_rx"], host["loss"]]
        self._write_rank_line({"step": step, "step_time_s": step_time_s, **record})
        if self._group is not None and step % self.s.cross_rank_every == 0:
            record.update(self._cross_rank([_nan(v) for v in mine]))
        elif self.world == 1:
            record.update(self._cross_rank([_nan(v) for v in mine], gathered=[[_nan(v) for v in mine]]))
        return record

    def _cross_rank(self, mine: list[float], gathered=None) -> dict:
        if gathered is None:
            local = torch.tensor(mine, dtype=torch.float64)
            out = torch.empty(self.world * len(mine), dtype=torch.float64)
            gather = "all_gather_single" if hasattr(dist, "all_gather_single") else "all_gather_into_tensor"
            self.tracer.original(gather)(out, local, group=self._group)
            gathered = out.view(self.world, len(mine)).tolist()
        if self.rank != 0:
            return {}
        cols = {name: [row[i] for row in gathered] for i, name in enumerate(GATHERED)}
        by_op = {op: s for op in OPS if (s := _spread(cols[f"time_{op}"])) is not None}
        return {
            "ranks": {"step_time_s": _spread(cols["step_time_s"]), "comm_time_s": _spread(cols["comm_time_s"]),
                      "comm_time_s_by_op": by_op},
            "energy_j": _sum_known(cols["gpu_energy_j"]),  # all GPUs of the job
            "power_w": _sum_known(cols["gpu_power_w"]),
            "cpu_energy_j": _sum_known(cols["host_cpu_energy_j"]),  # all hosts' CPU packages
            "net_tx_bytes": _sum_known(cols["host_net_tx_bytes"]),
            "net_rx_bytes": _sum_known(cols["host_net_rx_bytes"]),
            "rdma_tx_bytes": _sum_known(cols["host_rdma_tx_bytes"]),
            "rdma_rx_bytes": _sum_known(cols["host_rdma_rx_bytes"]),
            "loss_events": _sum_known(cols["host_loss_events"]),
        }

    def _write_rank_line(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, default=_json_default) + "\n")
            self._file.flush()

    # ------------------------------------------------------------ end

    def summary(self) -> dict:
        """What goes into run.json at the end: energy, loss verdict, exposed windows (this rank's view)."""
        if not self.started:
            return {"enabled": False}
        out = {"enabled": True,
               "gpu_energy_j": self._energy_total["gpu_j"] if self._energy_total["known"] else None,
               "gpu_energy_reason": self.gpu.reason,
               "counters": loss_verdict(self._loss_steps) if self.counters is not None else
               {"verdict": None, "reason": "read by the host's local rank 0"}}
        if self._exposed:
            out["exposed_windows"] = len(self._exposed)
            out["exposed_share_mean"] = statistics.mean(w["exposed_share"] for w in self._exposed)
        return out

    def close(self) -> None:
        if not self.started:
            return
        self.tracer.uninstall()
        self.gpu.close()
        if self.cpu is not None:
            self.cpu.close()
        if self._file is not None:
            self._file.close()
            self._file = None
        self.started = False


def _first(d):
    if not d:
        return None
    return next(iter(d.values()))


def _sum(d):
    if not d:
        return None
    known = [v for v in d.values() if v is not None]
    return sum(known) if known else None


def _sum_key(deltas: dict, prefix: str, key: str):
    vals = [v[key] for dev, v in deltas.items() if dev.startswith(prefix) and key in v]
    return sum(vals) if vals else None


def _json_default(obj):
    if isinstance(obj, float) and math.isnan(obj):
        return None
    return str(obj)
