"""The rest of what a server is, for the inventory (telemetry/capture/inventory.py): its model (DMI), CPU
sockets, memory size and speed, storage, PCIe link width and speed of the GPUs and NICs, NVSwitches and
the Fabric Manager's version, and each NIC's optics or cable (`ethtool -m`). Every field is a value or
None with the reason in `reasons`.

Sources: /sys/class/dmi/id (the model names are readable without root), /sys/devices/system/cpu/*/topology,
/proc/meminfo, `dmidecode -t 17` (memory speed: needs root), /sys/block, /sys/bus/pci/devices/*/
{current,max}_link_{width,speed}, PCI class 0x0680 from NVIDIA (NVSwitch), `nv-fabricmanager --version`.
"""
from __future__ import annotations

import os
import re
import subprocess
from telemetry.capture.host_tool import run_tool

NVIDIA = "0x10de"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None




def parse_dmidecode_memory(text: str) -> dict:
    """`dmidecode -t 17`: populated DIMMs, their total size (GiB), type, rated and configured speed (MT/s)."""
    dimms = []
    for block in re.split(r"\n(?=Handle )", text):
        if "Memory Device" not in block:
            continue
        size = re.search(r"^\s*Size:\s*(\d+)\s*(GB|MB|kB|TB)", block, re.M)
        if not size:
            continue  # "No Module Installed"
        gib = int(size.group(1)) * {"TB": 1024, "GB": 1, "MB": 1 / 1024, "kB": 1 / 1024 ** 2}[size.group(2)]

        def num(key):
            m = re.search(rf"^\s*{key}:\s*(\d+)\s*MT/s", block, re.M)
            return int(m.group(1)) if m else None
        kind = re.search(r"^\s*Type:\s*(\S+)", block, re.M)
        dimms.append({"gib": gib, "type": kind.group(1) if kind else None, "speed_mts": num("Speed"),
                      "configured_mts": num("Configured Memory Speed")})
    if not dimms:
        return {"dimms": 0, "memory_gib": None, "memory_type": None, "memory_speed_mts": None}
    speeds = [d["configured_mts"] or d["speed_mts"] for d in dimms if d["configured_mts"] or d["speed_mts"]]
    return {"dimms": len(dimms), "memory_gib": sum(d["gib"] for d in dimms),
            "memory_type": "/".join(sorted({d["type"] for d in dimms if d["type"]})) or None,
            "memory_speed_mts": min(speeds) if speeds else None}


def parse_ethtool_module(text: str) -> dict:
    """`ethtool -m IF`: module type, what it carries, length, vendor and part (SFF-8636/8472/CMIS text)."""
    fields = {}
    for line in text.splitlines():
        if line.lstrip().startswith("#") or ":" not in line:
            continue
        k, _, v = line.partition(":")
        fields.setdefault(k.strip(), v.strip())
    ident = re.search(r"\((.*)\)", fields.get("Identifier", ""))
    length = next((f"{v} ({k.removeprefix('Length').strip(' ()')})" for k, v in fields.items()
                   if k.startswith("Length") and not re.fullmatch(r"0(m|km)?", v)), None)
    return {"module": ident.group(1) if ident else fields.get("Identifier"),
            "transceiver": fields.get("Transceiver type"), "length": length,
            "vendor": fields.get("Vendor name"), "part": fields.get("Vendor PN"),
            "connector": fields.get("Connector")}


def pci_link(root: str, bdf: str) -> dict | None:
    """A PCI device's negotiated and maximum link: {"width", "speed", "max_width", "max_speed"}."""
    d = os.path.join(root, "sys", "bus", "pci", "devices", bdf)
    if not os.path.isdir(d):
        return None
    out = {k: _read(os.path.join(d, f)) for k, f in (("width", "current_link_width"), ("speed", "current_link_speed"),
                                                      ("max_width", "max_link_width"), ("max_speed", "max_link_speed"))}
    return out if any(out.values()) else None


def _bdf(bus_id: str) -> str:
    """nvidia-smi's 00000000:18:00.0 -> sysfs' 0000:18:00.0."""
    dom, _, rest = bus_id.partition(":")
    return f"{dom[-4:]}:{rest}".lower() if rest else bus_id.lower()


def collect(root: str = "/", run=subprocess.run, gpus: list[dict] | None = None, nics: list[dict] | None = None
            ) -> tuple[dict, dict]:
    """(fields, reasons) for this host; fills each NIC's `pcie` and `module` in place."""
    reasons: dict[str, str] = {}
    out: dict = {}
    dmi = os.path.join(root, "sys", "class", "dmi", "id")
    out["server"] = {k: _read(os.path.join(dmi, k)) for k in ("sys_vendor", "product_name", "board_name",
                                                               "bios_version")}
    if not any(out["server"].values()):
        out["server"] = None
        reasons["server"] = "no /sys/class/dmi/id (a VM or container without DMI)"

    cpu = os.path.join(root, "sys", "devices", "system", "cpu")
    packages = {_read(os.path.join(cpu, c, "topology", "physical_package_id"))
                for c in (os.listdir(cpu) if os.path.isdir(cpu) else []) if re.fullmatch(r"cpu\d+", c)} - {None}
    out["cpu_sockets"] = len(packages) or None
    if out["cpu_sockets"] is None:
        reasons["cpu_sockets"] = "no CPU topology in /sys/devices/system/cpu"

    meminfo = _read(os.path.join(root, "proc", "meminfo")) or ""
    m = re.search(r"MemTotal:\s*(\d+)\s*kB", meminfo)
    out["memory_gib"] = round(int(m.group(1)) / 1024 ** 2, 1) if m else None
    if out["memory_gib"] is None:
        reasons["memory_gib"] = "no MemTotal in /proc/meminfo"
    text, why = run_tool(run, "dmidecode", "-t", "17")
    mem = parse_dmidecode_memory(text) if text else None
    out["memory_dimms"] = mem["dimms"] if mem else None
    out["memory_type"] = mem["memory_type"] if mem else None
    out["memory_speed_mts"] = mem["memory_speed_mts"] if mem else None
    for k in ("memory_dimms", "memory_type", "memory_speed_mts"):
        if out[k] is None:
            reasons[k] = why or "dmidecode -t 17 listed no populated DIMM (a VM)"

    block = os.path.join(root, "sys", "block")
    disks = []
    for name in sorted(os.listdir(block)) if os.path.isdir(block) else []:
        if re.match(r"(loop|ram|zram|dm-|md|sr|fd)", name):
            continue
        sectors = _read(os.path.join(block, name, "size"))
        if not sectors or int(sectors) == 0:
            continue
        disks.append({"name": name, "gb": round(int(sectors) * 512 / 1e9, 1),
                      "model": _read(os.path.join(block, name, "device", "model")),
                      "rotational": _read(os.path.join(block, name, "queue", "rotational")) == "1"})
    out["storage"] = disks or None
    if not disks:
        reasons["storage"] = "no block device in /sys/block"

    gpu_links = {}
    for g in gpus or []:
        link = pci_link(root, _bdf(g.get("pci_bus_id") or ""))
        if link:
            gpu_links[g.get("pci_bus_id")] = link
    out["gpu_pcie"] = gpu_links or None
    if not gpu_links:
        reasons["gpu_pcie"] = "no GPU" if not gpus else "the GPUs' PCI devices have no link attributes in sysfs"
    for nic in nics or []:
        iface = nic.get("interface")
        dev = os.path.realpath(os.path.join(root, "sys", "class", "net", iface, "device")) if iface else None
        nic["pcie"] = pci_link(root, os.path.basename(dev)) if dev and os.path.isdir(dev) else None
        if iface:
            text, why = run_tool(run, "ethtool", "-m", iface)
            nic["module"] = parse_ethtool_module(text) if text else None
            if text is None:
                nic.setdefault("module_reason", why)

    pci = os.path.join(root, "sys", "bus", "pci", "devices")
    switches = [d for d in (sorted(os.listdir(pci)) if os.path.isdir(pci) else [])
                if _read(os.path.join(pci, d, "vendor")) == NVIDIA
                and (_read(os.path.join(pci, d, "class")) or "").startswith("0x0680")]
    out["nvswitches"] = len(switches)
    text, why = run_tool(run, "nv-fabricmanager", "--version")
    m = re.search(r"version is\s*:?\s*(\S+)", text or "", re.I)
    out["fabric_manager"] = m.group(1) if m else None
    if out["fabric_manager"] is None:
        reasons["fabric_manager"] = ("no NVSwitch here: Fabric Manager is not needed" if not switches else
                                     why or "nv-fabricmanager printed no version")
    return out, reasons
