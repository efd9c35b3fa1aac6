"""Process group identity for the collective tracer: mesh dimension names, sizes, ranks and scope (intra/inter host)."""
from __future__ import annotations

import threading
import weakref
from typing import Any

import torch.distributed as dist


class PerGroup:
    """A value per process group, held weakly where the group allows it (the entry goes with a destroyed
    group), else by the group's id with the group kept beside it. Callers hold their own lock."""

    def __init__(self):
        self._weak: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._strong: dict[int, tuple[object, Any]] = {}  # groups that cannot be weakly referenced

    def get(self, pg) -> Any:
        try:
            return self._weak.get(pg)
        except TypeError:
            return self._strong.get(id(pg), (None, None))[1]

    def set(self, pg, value) -> None:
        try:
            self._weak[pg] = value
        except TypeError:
            self._strong[id(pg)] = (pg, value)

    def setdefault(self, pg, value) -> None:
        try:
            self._weak.setdefault(pg, value)
        except TypeError:
            self._strong.setdefault(id(pg), (pg, value))

    def pop(self, pg) -> None:
        try:
            self._weak.pop(pg, None)
        except TypeError:
            self._strong.pop(id(pg), None)

    def clear(self) -> None:
        self._weak.clear()
        self._strong.clear()


# Which mesh dimension each process group is (registered by whoever builds the meshes: trainer/distributed.py),
# and every rank's host (run.json `hosts`), from which a group's scope follows: "intra" when all its ranks
# share a host (NVLink, loopback), "inter" when it spans hosts (the fabric).
_GROUP_DIMS = PerGroup()  # group -> its mesh dimension
_IDENTITY = PerGroup()  # group -> group_identity()'s answer
_HOST_OF_RANK: list[str] | None = None
INTRA, INTER = "intra", "inter"
NO_HOSTS = "the host of each rank was not recorded"
UNKNOWN_GROUP = "unknown"
_LOCK = threading.Lock()


def name_group(pg, dim: str) -> None:
    """Name `pg` after its mesh dimension (dp, tp, pp, cp, ...). A group that serves several dimensions
    keeps the first name it was given (the mesh owner registers its dimensions in mesh order)."""
    if pg is None:
        return
    with _LOCK:
        _GROUP_DIMS.setdefault(pg, dim)
        _IDENTITY.pop(pg)


def group_label(pg) -> str:
    return str(getattr(pg, "group_name", None) or getattr(pg, "name", lambda: "?")())


def _registered_dim(pg) -> str | None:
    return _GROUP_DIMS.get(pg)


def _size(pg) -> int:
    try:
        return int(pg.size())
    except (RuntimeError, AttributeError, TypeError, ValueError):
        return 1


def set_host_map(hosts: list[str | None] | None) -> None:
    """Every rank's host name, in global rank order (run.json `hosts`); groups' scopes follow from it."""
    global _HOST_OF_RANK
    with _LOCK:
        _HOST_OF_RANK = list(hosts) if hosts else None
        _IDENTITY.clear()


def _group_ranks(pg) -> list[int] | None:
    ranks = getattr(pg, "ranks", None)  # test doubles and foreign groups may say so themselves
    if ranks is not None:
        return [int(r) for r in ranks]
    try:
        return [int(r) for r in dist.get_process_group_ranks(pg)]
    except (RuntimeError, ValueError, AttributeError, KeyError, TypeError):
        return None


def ranks_name(ranks: list[int]) -> str:
    """A stable name for a group no mesh named, from its global ranks: g[0,1,2,3], or g[0..62/2] (first,
    last and stride) for longer evenly spaced ones."""
    if len(ranks) <= 8:
        return "g[" + ",".join(map(str, ranks)) + "]"
    steps = {b - a for a, b in zip(ranks, ranks[1:])}
    if len(steps) == 1:
        return f"g[{ranks[0]}..{ranks[-1]}/{steps.pop()}]"
    return f"g[{ranks[0]},{ranks[1]},...,{ranks[-1]}]({len(ranks)})"


def group_identity(pg) -> dict:
    """{name, dim, size, ranks, scope, hosts} of a process group, computed once per group.

    name: the mesh dimension where one was registered (or the group's DeviceMesh description says it), else
    "world" for the default group, else a name from its ranks. scope: "intra" (one host), "inter" (spans
    hosts), or None with `scope_reason` when the ranks' hosts are unknown."""
    with _LOCK:
        got = _IDENTITY.get(pg)
        if got is not None:
            return got
        host_map = _HOST_OF_RANK
    dim = _registered_dim(pg)
    desc = str(getattr(pg, "group_desc", "") or "")
    if dim is None and desc.startswith("mesh_") and desc != "mesh_default":
        dim = desc[len("mesh_"):]
    ranks = _group_ranks(pg)
    size = _size(pg)
    try:
        default = pg is dist.distributed_c10d._get_default_group()
    except (RuntimeError, ValueError, AttributeError):
        default = False
    name = dim or ("world" if default else ranks_name(ranks) if ranks else group_label(pg))
    ident = {"name": name, "dim": dim, "size": size, "ranks": ranks, "scope": None}
    if host_map is not None and ranks:
        hosts = sorted({host_map[r] for r in ranks if 0 <= r < len(host_map) and host_map[r] is not None})
        if hosts:
            ident["hosts"] = len(hosts)
            ident["scope"] = INTER if len(hosts) > 1 else INTRA
    if ident["scope"] is None:
        ident["scope_reason"] = NO_HOSTS if host_map is None else "the group's ranks are not known"
    with _LOCK:
        _IDENTITY.set(pg, ident)
    return ident
