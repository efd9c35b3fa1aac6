"""Process group set-up and the one owner of the parallel degrees and device meshes."""
from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from telemetry.capture.group_timeout import GroupWaitFailed, carry_job_timeout

from .layout import Layout


def pick_device() -> torch.device:
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def pick_backend(requested: str, device: torch.device) -> str:
    if requested == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if requested == "nccl" and device.type != "cuda":
        raise RuntimeError("distributed.backend: got 'nccl' but no CUDA device is visible; "
                           "allowed here: gloo or auto")
    return requested


def bind_loopback_on_one_host(environ=os.environ) -> dict:
    """A job whose ranks all run on this host needs no other interface: gloo's sockets and NCCL's bootstrap
    listen on loopback only (unless the user named an interface). Returns what it set."""
    one_host = "WORLD_SIZE" not in environ or environ.get("LOCAL_WORLD_SIZE") == environ.get("WORLD_SIZE")
    if not one_host or "lo" not in {name for _, name in socket.if_nameindex()}:
        return {}
    applied = {var: "lo" for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if not environ.get(var)}
    environ.update(applied)
    return applied


FLIGHT_RECORDER_DIR = "flight_recorder"  # under the run's logs/; read by telemetry.analysis.flight_recorder


def prepare_flight_recorder(logs_dir: str, environ=os.environ) -> None:
    """Before init: keep torch's ring buffer of recent collectives, and have NCCL's watchdog dump it into
    the run directory on a timeout (unless the user set these)."""
    path = os.path.join(logs_dir, FLIGHT_RECORDER_DIR)
    os.makedirs(path, exist_ok=True)
    prefix = os.path.join(path, "nccl_trace_rank")
    # torch renamed TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE to TORCH_FR_* (the old
    # names still work but print a deprecation warning): the old ones only for torch before 2.8
    old = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (2, 8)
    buffer_var, file_var = (("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE") if old
                            else ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE"))
    if not environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        environ.setdefault(buffer_var, "2000")
    if not environ.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        environ.setdefault(file_var, prefix)
    environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")


def dump_flight_recorder(logs_dir: str, rank: int) -> dict | None:
    """This rank's flight-recorder buffer as JSON in logs/flight_recorder/rankN.json (any backend); the
    dump, or None where this torch has no JSON dump."""
    import json

    try:
        from torch._C._distributed_c10d import _dump_fr_trace_json
        raw = _dump_fr_trace_json()
        dump = json.loads(raw)
    except Exception:  # noqa: BLE001 - older torch, or no buffer: nothing to add
        return None
    path = os.path.join(logs_dir, FLIGHT_RECORDER_DIR, f"rank{rank}.json")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(raw)
    except OSError:
        pass
    return dump


NAMED_PEERS = 8  # a timeout's line names this many of a group's peers, then counts the rest


def describe_timeout(dump: dict | None, rank: int, step: int | None, timeout_s: int, hosts: list,
                     backend: str, environ=os.environ, exc: BaseException | None = None, after: bool = False,
                     sweeping: str | None = None) -> str:
    """One line for a collective that timed out: which one, at which step, who did not answer, over which
    interface, and the setting that sets the time (`after`: the loop took its last step, `step`). Where the failed wait said what and whom it waited for
    (telemetry's exchange, which the flight recorder does not see: its last entry is the job's), that wins."""
    entries = [e for e in (dump or {}).get("entries", []) if isinstance(e, dict)]
    # NCCL marks the stuck one unfinished; gloo retires a failed one too, so then it is the last issued
    unfinished = [e for e in entries if not e.get("retired") and e.get("state") != "completed"]
    pending = max(unfinished or entries, key=lambda e: e.get("record_id") or 0, default=None)
    what, peers = "a collective", [r for r in range(len(hosts)) if r != rank]
    if pending is not None:
        op = str(pending.get("profiling_name") or "?").split(":", 1)[-1]
        group = pending.get("process_group") or ["?", ""]
        desc = group[1] if len(group) > 1 and group[1] else group[0]
        what = f"{op} #{pending.get('collective_seq_id')} (process group {desc})"
        ranks = ((dump.get("pg_config") or {}).get(str(group[0])) or {}).get("ranks")
        try:
            members = [int(x) for x in str(ranks).strip("[]").split(",") if x.strip()]
            peers = [r for r in members if r != rank] or peers
        except ValueError:
            pass

    if isinstance(exc, GroupWaitFailed):
        what = exc.what
        peers = [exc.peer] if exc.peer is not None else peers

    def name(r):
        h = hosts[r] if 0 <= r < len(hosts) and isinstance(hosts[r], dict) else {}
        return f"rank {r} (host {h.get('hostname')})" if h else f"rank {r}"
    var = "NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"
    iface = f"interface {environ[var]} ({var})" if environ.get(var) else f"the host name's interface ({var} unset)"
    who = name(peers[0]) if len(peers) == 1 else "one of " + ", ".join(name(r) for r in peers[:NAMED_PEERS])
    if len(peers) > NAMED_PEERS:  # a group of 1,024: its 1,023 names were the line; the dumps name the silent one
        on = {(hosts[r] or {}).get("hostname") for r in peers if 0 <= r < len(hosts) and isinstance(hosts[r], dict)}
        where = f" on {len(on):,} hosts" if on else ""
        who += f" and {len(peers) - NAMED_PEERS:,} more ({len(peers):,} peers{where})"
    at = f"{'after' if after else 'at'} step {step}" if step is not None else "at start-up"
    if sweeping:  # a sweep has no steps: its case, and that one call of it may outlast the timeout on a slow link
        at = f"in the sweep's {sweeping.removeprefix('the ')}"
    tail = ("" if isinstance(exc, GroupWaitFailed) else  # not in the dumps: they cannot name anyone for it
            " (python -m telemetry report RUN names the rank that never entered it)")
    if sweeping and "bytes)" in sweeping:  # a size's call (not the set-up of a test's groups, nor the latency table)
        return (f"distributed: {what} {at} timed out after {timeout_s} s waiting for {who} over {iface}; the time is "
                "distributed.timeout_s, which one call of this size must finish within (on a slow link, raise it or "
                f"lower sweep.max_bytes); dumps in logs/{FLIGHT_RECORDER_DIR}/")
    return (f"distributed: {what} {at} timed out after {timeout_s} s waiting for {who} over {iface}; "
            f"the time is distributed.timeout_s; dumps in logs/{FLIGHT_RECORDER_DIR}/{tail}")


def is_timeout(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("Timed out" in text or "timed out" in text or "Timeout" in text)


def init_process_group(backend: str, device: torch.device, timeout_s: int) -> None:
    """Join torchrun's group, or make a group of one when run as plain `python -m trainer`.

    A group of one keeps a single code path: DDP/FSDP and the reductions work unchanged.
    """
    timeout = datetime.timedelta(seconds=timeout_s)
    if dist.is_initialized():
        return
    bind_loopback_on_one_host()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, timeout=timeout, **kwargs)
    else:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)


def world_size_from_env() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


@dataclass
class ParallelDims:
    """Owns the degrees and the meshes; everything else asks it for a named mesh.

    Mesh dimensions are ordered (pp, dp, tp) so that tp ranks are adjacent (same node, fastest
    links) and pp spans the slowest links, the conventional placement.
    """

    layout: Layout
    device_type: str
    _mesh: DeviceMesh | None = field(default=None, init=False, repr=False)

    @property
    def world_mesh(self) -> DeviceMesh:
        if self._mesh is None:
            lay = self.layout
            self._mesh = init_device_mesh(self.device_type, (lay.pp, lay.dp, lay.tp),
                                          mesh_dim_names=("pp", "dp", "tp"))
            for name in self._mesh.mesh_dim_names:  # DeviceMesh takes no timeout: torch's 10/30 min otherwise
                carry_job_timeout(self._mesh.get_group(name))
            self._register_groups()
        return self._mesh

    def _register_groups(self) -> None:
        """Tell telemetry which mesh dimension each of this rank's groups is, so that communication is
        reported per dimension (tp inside a node, dp across nodes); larger dimensions first, so a group
        that serves a dimension of size 1 too is named after the one that moves data."""
        from telemetry.capture.collectives import register_group

        names = sorted(self._mesh.mesh_dim_names, key=lambda n: -self._mesh[n].size())
        for name in names:
            register_group(self._mesh.get_group(name), name)

    def mesh(self, name: str) -> DeviceMesh:
        return self.world_mesh[name]

    @property
    def dp_rank(self) -> int:
        return self.mesh("dp").get_local_rank()

    @property
    def dp_group(self) -> dist.ProcessGroup:
        return self.mesh("dp").get_group()
