"""Which transport NCCL really used, read from NCCL's own INFO log (REFERENCE.md section 4).

Needs NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS including INIT,NET (NET carries the GPUDirect RDMA line).
The parser is line-oriented and tolerant: unknown lines are skipped, so it works on whole multi-rank
logs and on partial logs of crashed jobs.
"""
from __future__ import annotations

import glob
import os
import re
from collections import Counter

_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_PLUGIN = re.compile(r"NCCL INFO NET/Plugin\s*:?\s*(.*)")
_NET_IB_USING = re.compile(r"NET/IB ?: Using (.*?)(?:; OOB (\S+))?\s*$")
_IB_DEVICE = re.compile(r"\[(\d+)\]([\w.\-]+):(\d+)/(RoCE|IB)")
_NET_SOCKET_USING = re.compile(r"NET/Socket ?: Using (.*)$")
_SOCKET_DEVICE = re.compile(r"\[(\d+)\]([\w.\-]+):([^<\s]+)")
_NO_IB = re.compile(r"NET/IB ?: No device found")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']+)'")
_CHANNEL = re.compile(r"Channel (\d+)(?:/\d+)? ?: (\d+)\[[^\]]*\] -> (\d+)\[[^\]]*\](?: \[(send|receive)\])? via (\S+)")


def _channel_kind(via: str) -> str:
    """Collapse 'P2P/IPC', 'NET/IB/0/GDRDMA', 'SHM/direct/direct' into P2P, SHM, NET/IB, NET/Socket, ..."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    return parts[0]


def parse_lines(lines) -> dict:
    version = network = plugin = oob = None
    ib_devices: dict[str, dict] = {}
    socket_devices: dict[str, dict] = {}
    gdr: dict[str, bool] = {}
    channel_kinds: Counter = Counter()
    gdr_channels = 0
    no_ib = False
    for line in lines:
        if "NCCL" not in line and "Channel" not in line and "NET/" not in line:
            continue
        if m := _VERSION.search(line):
            version = m.group(1).split("+")[0]
        elif m := _USING_NETWORK.search(line):
            network = m.group(1)
        elif m := _NET_PLUGIN.search(line):
            plugin = m.group(1).strip() or plugin
        elif m := _NET_IB_USING.search(line):
            for idx, dev, port, link in _IB_DEVICE.findall(m.group(1)):
                ib_devices[f"{dev}:{port}"] = {"index": int(idx), "device": dev, "port": int(port),
                                               "link_layer": "RoCE" if link == "RoCE" else "InfiniBand"}
            oob = m.group(2) or oob
        elif _NO_IB.search(line):
            no_ib = True
        elif m := _NET_SOCKET_USING.search(line):
            for idx, ifname, addr in _SOCKET_DEVICE.findall(m.group(1)):
                socket_devices[ifname] = {"index": int(idx), "interface": ifname, "address": addr}
        elif m := _GDR.search(line):
            gdr[m.group(3)] = m.group(1) == "Enabled"
        elif m := _CHANNEL.search(line):
            via = m.group(5)
            channel_kinds[_channel_kind(via)] += 1
            if "GDRDMA" in via:
                gdr_channels += 1
    net_channels = sum(n for kind, n in channel_kinds.items() if kind.startswith("NET/"))
    return {
        "nccl_version": version,
        "network": network,
        "net_plugin": plugin,
        "ib_devices": sorted(ib_devices.values(), key=lambda d: d["index"]),
        "ib_absent": no_ib,
        "socket_devices": sorted(socket_devices.values(), key=lambda d: d["index"]),
        "oob_interface": oob,
        "gpudirect_rdma": _gdr_verdict(gdr, gdr_channels, net_channels),
        "gdr_by_hca": gdr,
        "channels": dict(channel_kinds),
        "transport": _transport(network, ib_devices, socket_devices, channel_kinds),
    }


def _gdr_verdict(gdr: dict, gdr_channels: int, net_channels: int) -> bool | None:
    if gdr_channels:
        return True
    if gdr:
        return any(gdr.values())
    return False if net_channels else None  # no network channels: GDR does not apply


def _transport(network, ib_devices, socket_devices, channel_kinds) -> str | None:
    """One word for the inter-node transport: roce, infiniband, tcp, intra-node, or None if unknown."""
    kinds = set(channel_kinds)
    uses_ib = any(k == "NET/IB" or (k.startswith("NET/") and k != "NET/Socket") for k in kinds)
    if not kinds:  # no channel lines (e.g. only init logged): fall back to what NCCL said it would use
        uses_ib = network is not None and network != "Socket" and bool(ib_devices)
        if network == "Socket":
            return "tcp"
        if not uses_ib:
            return None
    if uses_ib:
        links = {d["link_layer"] for d in ib_devices.values()}
        if links == {"RoCE"}:
            return "roce"
        if links == {"InfiniBand"}:
            return "infiniband"
        return "roce+infiniband" if links else "ib-verbs"
    if "NET/Socket" in kinds:
        return "tcp"
    return "intra-node"


def _lines(paths):
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield from f


def parse_files(paths) -> dict:
    out = parse_lines(_lines(paths))  # streamed: a 1,024-rank job's logs need not fit in memory at once
    out["log_files"] = len(paths)
    return out


def parse_dir(log_dir: str, pattern: str = "nccl.*.log") -> dict | None:
    paths = sorted(glob.glob(os.path.join(log_dir, pattern)))
    return parse_files(paths) if paths else None
