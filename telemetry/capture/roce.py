"""RoCE's addressing and priority as a host sets them: the GID table of each Ethernet RDMA port (index ->
RoCE v1 or v2, from sysfs) and the port's traffic class (mlx5's `tc/<port>/traffic_class`).

Which GID index a job used is in NCCL's log (`NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 576 mtu 3 GID 3 (...)`)
or NCCL_IB_GID_INDEX; the analysis joins the two. The kernel lists a GID's type in
`/sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>` ("IB/RoCE v1" or "RoCE v2"); an unused
index reads as an error or a zero GID and is left out.
"""
from __future__ import annotations

import os
import re

_ZERO_GID = re.compile(r"^[0:]*$")
_TCLASS = re.compile(r"tclass=(\d+)")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def gid_table(root: str, device: str, port: int, limit: int = 256) -> list[dict]:
    """[{index, gid, type, netdev}] for the port's populated GIDs."""
    base = os.path.join(root, "class", "infiniband", device, "ports", str(port))
    gids = os.path.join(base, "gids")
    if not os.path.isdir(gids):
        return []
    out = []
    for name in sorted(os.listdir(gids), key=lambda n: int(n) if n.isdigit() else 1 << 30)[:limit]:
        gid = _read(os.path.join(gids, name))
        if not name.isdigit() or not gid or _ZERO_GID.match(gid):
            continue
        out.append({"index": int(name), "gid": gid,
                    "type": _read(os.path.join(base, "gid_attrs", "types", name)),
                    "netdev": _read(os.path.join(base, "gid_attrs", "ndevs", name))})
    return out


def traffic_class(root: str, device: str, port: int) -> int | None:
    """The port's global traffic class (mlx5: `Global tclass=106`), None where the driver has no such file."""
    text = _read(os.path.join(root, "class", "infiniband", device, "tc", str(port), "traffic_class"))
    m = _TCLASS.search(text or "")
    return int(m.group(1)) if m else None


def describe(root: str, hcas: list[dict]) -> dict | None:
    """{"device:port": {"gids": [...], "traffic_class": int | None}} for the Ethernet (RoCE) ports."""
    out = {}
    for h in hcas:
        if (h.get("link_layer") or "").lower() != "ethernet":
            continue
        out[f"{h['device']}:{h['port']}"] = {"gids": gid_table(root, h["device"], h["port"]),
                                             "traffic_class": traffic_class(root, h["device"], h["port"])}
    return out or None
