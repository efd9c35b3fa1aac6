"""Fabric identity: which backend, transport, interfaces and HCAs a run used, and whether that is what
the recipe expected (the classic failure is a silent fallback from RDMA to TCP sockets)."""
from __future__ import annotations

import fcntl
import json
import os
import socket
import struct

from .counters import list_hcas, list_interfaces
from .environment import redacted_env
from .nccl_log import parse_dir

EXPECTATIONS = ("any", "roce", "infiniband", "tcp", "intra-node")
NCCL_LOG_PATTERN = "nccl.%h.%p.log"
_SIOCGIFADDR = 0x8915


def configure_nccl_logging(log_dir: str, environ=os.environ) -> dict:
    """Point NCCL's INFO log into the run directory, unless the user already chose their own settings.

    Must run before the process group is created: NCCL reads these once, at init.
    """
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH,ENV",
              "NCCL_DEBUG_FILE": os.path.join(os.path.abspath(log_dir), NCCL_LOG_PATTERN)}
    applied = {}
    for key, value in wanted.items():
        if key not in environ:
            environ[key] = value
            applied[key] = value
    return applied


def interface_addresses() -> dict[str, str]:
    """IPv4 address of each interface (Linux ioctl; interfaces without one are left out)."""
    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
                out[name] = socket.inet_ntoa(packed[20:24])
            except OSError:
                continue
    return out


def gloo_interface(environ=os.environ) -> dict:
    """The interface gloo talks over: GLOO_SOCKET_IFNAME if set, else the one routing to MASTER_ADDR."""
    if environ.get("GLOO_SOCKET_IFNAME"):
        return {"interface": environ["GLOO_SOCKET_IFNAME"].split(",")[0], "how": "GLOO_SOCKET_IFNAME"}
    master = environ.get("MASTER_ADDR")
    if not master:
        return {"interface": None, "how": "single process: no peers"}
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, int(environ.get("MASTER_PORT", "29500"))))  # UDP connect sends nothing
            local = s.getsockname()[0]
    except OSError as exc:
        return {"interface": None, "how": f"route to MASTER_ADDR {master} unknown: {exc}"}
    for name, addr in interface_addresses().items():
        if addr == local:
            return {"interface": name, "address": local, "how": f"route to MASTER_ADDR {master}"}
    return {"interface": None, "address": local, "how": f"no interface holds {local}"}


def describe(backend: str, nccl_version: str | None, sysfs: str = "/sys", environ=os.environ) -> dict:
    """The static part of the fabric identity, known at start-up."""
    interfaces = list_interfaces(sysfs)
    info = {"backend": backend, "nccl_version": nccl_version, "environment": redacted_env(environ),
            "interfaces": interfaces, "hcas": list_hcas(sysfs), "transport": None, "nccl": None}
    if environ.get("FABRIC_HARNESS_LAB"):  # launched by launch.lab: the emulated links' description
        try:
            info["lab"] = json.loads(environ["FABRIC_HARNESS_LAB"])
        except json.JSONDecodeError:
            info["lab"] = None
    if backend == "gloo":
        used = gloo_interface(environ)
        speed = next((i["speed_mbps"] for i in interfaces if i["name"] == used.get("interface")), None)
        info["gloo"] = {**used, "speed_mbps": speed}
        name = used.get("interface")
        info["transport"] = "loopback" if name == "lo" else ("tcp" if name else None)
        if used.get("how", "").startswith("single process"):
            info["transport"] = "none (single process)"
    return info


def detect_nccl_transport(log_dir: str) -> dict | None:
    return parse_dir(log_dir, "nccl.*.log")


def check_expectation(expected: str, detected: str | None) -> dict:
    """Compare the recipe's `fabric.expect` with what was detected; a mismatch is loud, not fatal."""
    if expected == "any":
        return {"expected": expected, "detected": detected, "match": None}
    if detected is None:
        return {"expected": expected, "detected": None, "match": None,
                "warning": f"fabric.expect is {expected!r} but the transport could not be detected"}
    # gloo over a real interface is TCP; loopback means every rank is on this host
    normalized = {"loopback": "intra-node", "none (single process)": "intra-node"}.get(detected, detected)
    match = normalized == expected
    out = {"expected": expected, "detected": detected, "match": match}
    if not match:
        out["warning"] = (f"FABRIC MISMATCH: the recipe expects {expected!r} but this run used {detected!r}"
                          + (" - NCCL fell back to TCP sockets (check NCCL_IB_DISABLE, NCCL_IB_HCA, "
                             "NCCL_SOCKET_IFNAME and the RDMA devices)" if detected == "tcp" else ""))
    return out
