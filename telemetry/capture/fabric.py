"""Fabric identity: which backend, transport, interfaces and HCAs a run used, and whether that is what
the recipe expected (the classic failure is a silent fallback from RDMA to TCP sockets)."""
from __future__ import annotations

import fcntl
import glob
import json
import os
import socket
import struct

from telemetry.capture import roce
from telemetry.capture.collectives import harness_traffic
from telemetry.capture.counters import list_hcas, list_interfaces
from telemetry.capture.environment import host_info, redacted_env
from telemetry.capture.nccl_log import parse_dir
from telemetry.transport_hints import TCP_FALLBACK

EXPECTATIONS = ("any", "roce", "infiniband", "efa", "tcp", "tcpx", "intra-node")
NCCL_LOG_PATTERN = "nccl.%h.%p.log"
_SIOCGIFADDR = 0x8915


def configure_nccl_logging(log_dir: str, environ=os.environ, tuning: bool = False) -> dict:
    """Point NCCL's INFO log into the run directory, unless the user already chose their own settings.
    tuning: TUNING too (the algorithm and protocol of each collective, telemetry/analysis/nccl_algorithms.py).

    Must run before the process group is created: NCCL reads these once, at init.
    """
    wanted = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,GRAPH,ENV" + (",TUNING" if tuning else ""),
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
        name = environ["GLOO_SOCKET_IFNAME"].split(",")[0]
        if _PINNED.get("pinned") and _PINNED.get("interface") == name and environ is os.environ:
            return {"interface": name, "how": f"GLOO_SOCKET_IFNAME {_PINNED['how']}"}
        return {"interface": name, "how": "GLOO_SOCKET_IFNAME"}
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


# What pin_gloo_interface decided for this process (run.json reports it).
_PINNED: dict = {}


def _is_loopback(address: str | None) -> bool:
    return bool(address) and address.startswith("127.")


def _multi_host(environ) -> bool | None:
    try:
        return int(environ["LOCAL_WORLD_SIZE"]) < int(environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None


def nccl_named_interface(value: str, addresses: dict[str, str]) -> str | None:
    """The first interface with an address that NCCL_SOCKET_IFNAME selects here: its entries are name
    prefixes, or exact names after a leading '='; an exclusion list ('^...') names none."""
    if not value or value.startswith("^"):
        return None
    exact = value.startswith("=")
    for want in (v for v in value.lstrip("=").split(",") if v):
        for name in addresses:
            if name == want or (not exact and name.startswith(want)):
                return name
    return None


def default_route_interface(route_table: str = "/proc/net/route") -> str | None:
    """The interface of the IPv4 default route (Linux), or None."""
    try:
        with open(route_table, encoding="utf-8") as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
    except OSError:
        return None
    for row in rows:
        if len(row) > 3 and row[1] == "00000000" and int(row[3], 16) & 1:  # destination 0/0, RTF_UP
            return row[0]
    return None


def pin_gloo_interface(environ=os.environ, addresses: dict[str, str] | None = None, route: dict | None = None,
                       default_route: str | None = None) -> dict:
    """On a job that spans hosts, set GLOO_SOCKET_IFNAME (if unset) before any gloo group is created.

    Unpinned, gloo binds to the address the host name resolves to; where /etc/hosts maps it to a loopback
    address, peers on other hosts cannot connect and creating the group stalls until its timeout. The
    interface is the first one NCCL_SOCKET_IFNAME selects, else the one holding the route to MASTER_ADDR,
    else (that route is loopback on MASTER_ADDR's own host) the default route's. gloo reads the variable
    each time a group is created, so this must run before the first gloo group it should apply to.
    `addresses`, `route`, `default_route` stand in for this host's in tests.
    """
    if environ.get("GLOO_SOCKET_IFNAME"):
        if environ is os.environ and _PINNED.get("pinned") and _PINNED["interface"] == environ["GLOO_SOCKET_IFNAME"]:
            return dict(_PINNED)  # pinned by an earlier call (before init_process_group)
        return {**gloo_interface(environ), "pinned": False}
    multi = _multi_host(environ)
    if not multi:
        how = "one host: gloo's default address works" if multi is False else "WORLD_SIZE/LOCAL_WORLD_SIZE unset"
        return {"interface": None, "pinned": False, "how": how}
    addresses = interface_addresses() if addresses is None else addresses
    name = how = None
    nccl = environ.get("NCCL_SOCKET_IFNAME", "")
    if (named := nccl_named_interface(nccl, addresses)) is not None:
        name, how = named, f"from NCCL_SOCKET_IFNAME={nccl}"
    else:
        routable = lambda n: bool(addresses.get(n)) and not _is_loopback(addresses[n])  # noqa: E731
        route = gloo_interface(environ) if route is None else route
        if routable(route.get("interface")):
            name, how = route["interface"], f"from the {route['how']}"
        else:
            fallback = default_route_interface() if default_route is None else default_route
            if routable(fallback):
                name, how = fallback, f"from the default route ({route.get('how')} is loopback or unknown here)"
    if name is None:
        out = {"interface": None, "pinned": False,
               "how": "no routable interface found: gloo binds to the host name's address (set GLOO_SOCKET_IFNAME)"}
    else:
        environ["GLOO_SOCKET_IFNAME"] = name
        out = {"interface": name, "address": addresses.get(name), "pinned": True, "how": f"set by telemetry {how}"}
    if environ is os.environ:
        _PINNED.clear()
        _PINNED.update(out)
    return out


def describe(backend: str, nccl_version: str | None, sysfs: str = "/sys", environ=os.environ) -> dict:
    """The static part of the fabric identity, known at start-up."""
    interfaces = list_interfaces(sysfs)
    info = {"backend": backend, "nccl_version": nccl_version, "environment": redacted_env(environ),
            "interfaces": interfaces, "hcas": list_hcas(sysfs), "transport": None, "nccl": None}
    info["roce"] = roce.describe(sysfs, info["hcas"])  # GID types and traffic class of the RoCE ports
    if environ.get("FABRIC_HARNESS_LAB"):  # launched by launch.lab: the emulated links' description
        try:
            info["lab"] = json.loads(environ["FABRIC_HARNESS_LAB"])
        except (ValueError, RecursionError):  # the trainer refuses it at start (trainer/launcher_env.py)
            info["lab"] = None
        if not isinstance(info["lab"], dict):
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


def nccl_log_host() -> str:
    """This host's name as NCCL writes it for %h in NCCL_DEBUG_FILE (cut at the first dot)."""
    return socket.gethostname().split(".")[0]


def detect_nccl_transport(log_dir: str, host: str | None = None) -> dict | None:
    """Parse the NCCL logs of one host (`host`: its files only, a bounded read) or of every rank (None)."""
    out = parse_dir(log_dir, f"nccl.{glob.escape(host)}.*.log" if host else "nccl.*.log")
    if out is not None:
        out["scope"] = f"host {host}" if host else "all ranks"
    return out


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
                          + (TCP_FALLBACK if detected == "tcp" else ""))
    return out


def socket_address() -> str | None:
    """The address this rank's gloo sockets use (its peers' transport errors name it), or None."""
    try:
        return interface_addresses().get(gloo_interface().get("interface"))
    except OSError:
        return None


def exchange_hosts(rank: int | None = None) -> list[dict]:
    """Every rank's host record - rank, local rank, host name, pid, socket address - gathered once at
    start-up, before the first step (so never counted in one); only this rank's outside a process group."""
    import torch.distributed as dist

    live = dist.is_initialized()
    me = {"rank": dist.get_rank() if live else (rank or 0), "local_rank": int(os.environ.get("LOCAL_RANK", 0)),
          **host_info(), "address": socket_address()}
    if not live or dist.get_world_size() == 1:
        return [me]
    hosts: list = [None] * dist.get_world_size()
    with harness_traffic():
        dist.all_gather_object(hosts, me)
    return hosts
