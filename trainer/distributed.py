"""Process group set-up and the one owner of the parallel degrees and device meshes."""
from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

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
        return self._mesh

    def mesh(self, name: str) -> DeviceMesh:
        return self.world_mesh[name]

    @property
    def dp_rank(self) -> int:
        return self.mesh("dp").get_local_rank()

    @property
    def dp_group(self) -> dist.ProcessGroup:
        return self.mesh("dp").get_group()
