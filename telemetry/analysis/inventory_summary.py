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


ROWS = (("GPU (driver)", _gpu), ("CUDA (torch build)", lambda i: i.get("cuda_runtime") or _unknown(i, "cuda_runtime")),
        ("NICs (driver, firmware)", _nics), ("OFED / rdma-core", _stack),
        ("OS; kernel", lambda i: f"{i.get('os') or _unknown(i, 'os')}; {i.get('kernel') or _unknown(i, 'kernel')}"),
        ("CPU", lambda i: i.get("cpu_model") or _unknown(i, "cpu_model")), ("container image", _container),
        ("GPU-NIC closest", _topology))


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
