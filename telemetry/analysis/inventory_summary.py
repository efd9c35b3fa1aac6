"""The inventory rows of a comparison's header: what each fabric's hosts were (run.json `inventory`,
telemetry/capture/inventory.py). Hosts of one run that agree show one value; unknowns say why."""
from __future__ import annotations

from telemetry.analysis.fabric_summary import merged_cell
from telemetry.analysis.runs import Run


def _unknown(inv: dict, field: str) -> str:
    return f"unknown ({(inv.get('reasons') or {}).get(field, 'not recorded')})"


def _gpu(inv: dict) -> str:
    if not inv.get("gpu_model"):
        return _unknown(inv, "gpu_model")
    n = len(inv.get("gpus") or [])
    return f"{n} x {inv['gpu_model']} (driver {inv.get('gpu_driver')})"


def _nics(inv: dict) -> str:
    nics = [n for n in inv.get("nics") or [] if n.get("rdma_device") or n.get("firmware")]
    if not nics:
        return _unknown(inv, "nics") if not inv.get("nics") else "no RDMA NIC; " + ", ".join(
            f"{n['interface']} ({n.get('driver') or 'driver unknown'})" for n in inv["nics"])
    kinds = {}
    for n in nics:
        key = (n.get("hca_type") or n.get("driver") or "NIC", n.get("driver"), n.get("rdma_fw_ver") or n.get("firmware"),
               n.get("rate"))
        kinds[key] = kinds.get(key, 0) + 1
    return "; ".join(f"{count} x {model}" + (f" {rate}" if rate else "") + f" ({driver or 'driver unknown'}, fw {fw})"
                     for (model, driver, fw, rate), count in kinds.items())


def _stack(inv: dict) -> str:
    if inv.get("ofed"):
        return inv["ofed"]
    if inv.get("rdma_core"):
        return f"rdma-core {inv['rdma_core']}"
    return f"unknown ({(inv.get('reasons') or {}).get('ofed', 'not recorded')}; no rdma-core)"


def _container(inv: dict) -> str:
    c = inv.get("container") or {}
    return c.get("image") or _unknown(inv, "container_image")


def _topology(inv: dict) -> str:
    topo = (inv.get("topology") or {}).get("gpu_nic")
    if not topo:
        return _unknown(inv, "topology")
    return ", ".join(f"{g}-{'/'.join(v['closest'])} {v['path']}" for g, v in topo.items())


def _server(inv: dict) -> str:
    srv = inv.get("server")
    if not srv:
        return _unknown(inv, "server")
    return " ".join(v for v in (srv.get("sys_vendor"), srv.get("product_name")) if v) + (
        f" (BIOS {srv['bios_version']})" if srv.get("bios_version") else "")


def _memory(inv: dict) -> str:
    sockets = inv.get("cpu_sockets")
    size = f"{inv['memory_gib']:g} GiB" if inv.get("memory_gib") is not None else _unknown(inv, "memory_gib")
    speed = (f"{inv.get('memory_dimms')} x {inv.get('memory_type') or 'DIMM'} at {inv['memory_speed_mts']} MT/s"
             if inv.get("memory_speed_mts") else f"speed {_unknown(inv, 'memory_speed_mts')}")
    return f"{sockets if sockets else _unknown(inv, 'cpu_sockets')} socket(s); {size}, {speed}"


def _storage(inv: dict) -> str:
    disks = inv.get("storage")
    if not disks:
        return _unknown(inv, "storage")
    return ", ".join(f"{d['name']} {d['gb']:g} GB" + (f" {d['model']}" if d.get("model") else "")
                     + (" (HDD)" if d.get("rotational") else "") for d in disks)


def _pcie(inv: dict) -> str:
    def link(x):
        return (f"x{x.get('width')} {x.get('speed') or ''}".strip()
                + (f" (max x{x.get('max_width')})" if x.get("max_width") and x.get("max_width") != x.get("width") else ""))
    gpus = {link(v) for v in (inv.get("gpu_pcie") or {}).values()}
    nics = {link(n["pcie"]) for n in inv.get("nics") or [] if n.get("pcie")}
    parts = []
    parts.append("GPUs " + " / ".join(sorted(gpus)) if gpus else f"GPUs {_unknown(inv, 'gpu_pcie')}")
    parts.append("NICs " + " / ".join(sorted(nics)) if nics else "NICs unknown (no PCIe link in sysfs)")
    return "; ".join(parts)


def _nvswitch(inv: dict) -> str:
    n = inv.get("nvswitches")
    fm = inv.get("fabric_manager") or _unknown(inv, "fabric_manager")
    return f"{n if n is not None else 'unknown'} NVSwitch(es); Fabric Manager {fm}"


def _optics(inv: dict) -> str:
    mods = {}
    for n in inv.get("nics") or []:
        m = n.get("module")
        if m:
            key = " ".join(v for v in (m.get("module"), m.get("transceiver"), m.get("length"), m.get("vendor"),
                                       m.get("part")) if v)
            mods[key] = mods.get(key, 0) + 1
    if not mods:
        why = next((n.get("module_reason") for n in inv.get("nics") or [] if n.get("module_reason")), "not recorded")
        return f"unknown ({why})"
    return "; ".join(f"{c} x {k}" for k, c in mods.items())


def _fec(inv: dict) -> str:
    vals = []
    for n in inv.get("nics") or []:
        f = (n.get("qos") or {}).get("fec")
        if f:
            counts = (f" (corrected {f['corrected_blocks']}, uncorrectable {f['uncorrectable_blocks']} blocks)"
                      if f.get("corrected_blocks") is not None else "")
            vals.append(f"{n.get('interface')} {f.get('active')}{counts}")
    return ", ".join(vals) if vals else "unknown (ethtool --show-fec not recorded)"


ROWS = (("GPU (driver)", _gpu), ("CUDA (torch build)", lambda i: i.get("cuda_runtime") or _unknown(i, "cuda_runtime")),
        ("NICs (driver, firmware)", _nics), ("OFED / rdma-core", _stack),
        ("OS; kernel", lambda i: f"{i.get('os') or _unknown(i, 'os')}; {i.get('kernel') or _unknown(i, 'kernel')}"),
        ("CPU", lambda i: i.get("cpu_model") or _unknown(i, "cpu_model")), ("container image", _container),
        ("GPU-NIC closest", _topology), ("server (DMI)", _server), ("CPU sockets; memory", _memory),
        ("storage", _storage), ("PCIe links", _pcie), ("NVSwitch; Fabric Manager", _nvswitch),
        ("optics and cables (ethtool -m)", _optics), ("FEC (ethtool --show-fec)", _fec))

# what must be alike between fabrics of one comparison: everything a host is but its network
NOT_FABRIC = ("GPU (driver)", "CUDA (torch build)", "OS; kernel", "CPU", "container image", "server (DMI)",
              "CPU sockets; memory", "storage", "NVSwitch; Fabric Manager")


def hardware_warnings(labels: list[str], rows: list[list[str]]) -> list[str]:
    """One line per inventory row, other than the fabric's own, whose value differs between fabrics."""
    out = []
    for row in rows:
        if row[0] in NOT_FABRIC and len(set(row[1:])) > 1 and not all(c.startswith("unknown") for c in row[1:]):
            out.append(f"HARDWARE DIFFERS between fabrics in {row[0]}: " + "; ".join(
                f"{lab}: {c}" for lab, c in zip(labels, row[1:])) + " - the comparison is not of the fabric alone")
    return out


def inventory_facts(run: Run) -> dict[str, str]:
    hosts = run.info.get("inventory") or {}
    if not hosts:
        return {name: "unknown (run.json has no inventory)" for name, _ in ROWS}
    out = {}
    for name, fn in ROWS:
        values = list(dict.fromkeys(fn(inv) for inv in hosts.values()))
        out[name] = values[0] if len(values) == 1 else " | ".join(f"{h}: {fn(i)}" for h, i in hosts.items())
    return out


def inventory_rows(groups: list[list[Run]]) -> list[list[str]]:
    """One row per inventory field, one column per fabric; repeats that differ show each distinct value."""
    per_group = [[inventory_facts(r) for r in runs] for runs in groups]
    return [[name] + [merged_cell(group, name) for group in per_group] for name, _ in ROWS]
