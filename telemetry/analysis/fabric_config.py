"""What the fabric was: the recipe's `fabric.config` (what the user states: topology, routing, the switch)
merged with what the hosts read themselves (inventory NICs: PFC and ECN per priority, DCQCN, firmware, port
speed, FEC) and what the switch exporter's labels carry (model, OS). Every key has a value with its source,
or null with the reason; a stated value the hosts contradict keeps the statement and says what they read.

Pure: works on a run.json dict (the trainer writes the result as run.json `fabric_config` at the end of a
run; runs from before are resolved on the fly).
"""
from __future__ import annotations

from telemetry.rundir import RunKey

KEYS = ("topology", "oversubscription", "routing", "pfc_priority", "ecn", "dcqcn", "switch_model", "switch_os",
        "nic_firmware", "port_speed", "fec")
STATED_ONLY = {"topology", "oversubscription", "routing"}
NOT_STATED = "not stated in fabric.config, and no host can read it"


def _used_nics(info: dict) -> list[tuple[str, dict]]:
    """(host, inventory NIC) for the NICs the job used: NCCL's devices, gloo's interface, else every RDMA NIC."""
    fab = info.get("fabric") or {}
    used = {d.get("device") for d in ((fab.get("nccl") or {}).get("devices") or [])} - {None}
    gloo = (fab.get("gloo") or {}).get("interface")
    out = []
    for host, inv in (info.get("inventory") or {}).items():
        nics = inv.get("nics") or []
        pick = [n for n in nics if n.get("rdma_device") in used or n.get("interface") in used] if used else \
            [n for n in nics if gloo and n.get("interface") == gloo] or [n for n in nics if n.get("rdma_device")]
        out += [(host, n) for n in pick]
    return out


def _agreed(values: list) -> tuple[object, str | None]:
    """One value where every NIC agrees, else (None, "the NICs differ: ...")."""
    distinct = list(dict.fromkeys(map(str, values)))
    if len(distinct) == 1:
        return values[0], None
    return None, "the NICs differ: " + ", ".join(distinct[:6])


def _host_value(key: str, nics: list[tuple[str, dict]]) -> tuple[object, str | None, str | None]:
    """(value, source, reason) read from the hosts' NICs for one key."""
    if not nics:
        return None, None, "no inventory of the NICs used (run.json inventory)"
    qos = [(h, n, n.get("qos") or {}) for h, n in nics]
    name = lambda h, n: f"{h}:{n.get('interface') or n.get('rdma_device')}"  # noqa: E731
    if key == "nic_firmware":
        vals = [n.get("rdma_fw_ver") or n.get("firmware") for _, n in nics]
        if any(v is None for v in vals):
            return None, None, "ethtool -i / sysfs fw_ver gave no firmware for " + ", ".join(
                name(h, n) for (h, n), v in zip(nics, vals) if v is None)
        v, why = _agreed(vals)
        return v, "ethtool -i / /sys/class/infiniband/*/fw_ver" if v else None, why
    if key == "port_speed":
        vals = [q.get("speed_mbps") and f"{q['speed_mbps'] / 1000:g} Gbit/s" or n.get("rate") for _, n, q in qos]
        if any(v is None for v in vals):
            return None, None, "no speed readable (sysfs speed, HCA rate)"
        v, why = _agreed(vals)
        return v, "/sys/class/net/*/speed or the HCA port rate" if v else None, why
    if key == "fec":
        vals = [(q.get("fec") or {}).get("active") for _, _, q in qos]
        if any(v is None for v in vals):
            return None, None, next((q["reasons"].get("fec") for _, _, q in qos if q.get("reasons", {}).get("fec")),
                                    "ethtool --show-fec not recorded")
        v, why = _agreed(vals)
        return v, "ethtool --show-fec" if v else None, why
    if key == "pfc_priority":
        vals = [q.get("pfc_priorities") for _, _, q in qos]
        if any(v is None for v in vals):
            return None, None, next((q["reasons"].get("pfc_priorities") for _, _, q in qos
                                     if q.get("reasons", {}).get("pfc_priorities")), "PFC not recorded")
        v, why = _agreed(vals)
        if why:
            return None, None, why
        src = next(q["sources"]["pfc_priorities"].split(" ")[0] for _, _, q in qos)
        return (v[0] if len(v) == 1 else (v or "off")), f"{src} on every NIC used", None
    if key in ("ecn", "dcqcn"):
        vals = [q.get("ecn") for _, _, q in qos]
        if any(v is None for v in vals):
            return None, None, next((q["reasons"].get("ecn") for _, _, q in qos if q.get("reasons", {}).get("ecn")),
                                    "ECN not recorded")
        v, why = _agreed(vals)
        if why:
            return None, None, why
        if key == "dcqcn":  # mlx5's reaction point is DCQCN: the sender's rate control on CNPs
            return bool(v.get("rp")), "/sys/class/net/*/ecn/roce_rp/enable (reaction point)", None
        text = (f"marking answered on priorities {v['np'] or 'none'} (notification point), rate reaction on "
                f"{v['rp'] or 'none'}; thresholds are the switch's (state them as fabric.config.ecn)")
        return text, "/sys/class/net/*/ecn/roce_{np,rp}/enable", None
    return None, None, NOT_STATED


def resolve(info: dict) -> dict[str, dict]:
    """{key: {"value", "source", "reason", "hosts_read"}} for every key of KEYS."""
    stated = (((info.get("recipe") or {}).get("fabric") or {}).get("config")) or {}
    ident = (info.get(RunKey.SWITCH_METRICS) or {}).get("identity") or {}
    nics = _used_nics(info)
    out = {}
    for key in KEYS:
        entry = {"value": None, "source": None, "reason": None}
        own = stated.get(key)
        if key in ("switch_model", "switch_os"):
            read, source = ident.get(key), f"switch exporter label ({ident.get('series')})" if ident.get(key) else None
            why = ("the switch exporter's info labels do not name it" if ident else
                   "not stated in fabric.config, and no switch exporter (telemetry.switch_metrics_url) read")
        elif key in STATED_ONLY:
            read, source, why = None, None, NOT_STATED
        else:
            read, source, why = _host_value(key, nics)
        if own is not None:
            entry.update(value=own, source="recipe fabric.config")
            if read is not None and str(read).lower() != str(own).lower():
                entry["hosts_read"] = f"{read} ({source})"
        elif read is not None:
            entry.update(value=read, source=source)
        else:
            entry["reason"] = why
        out[key] = entry
    return out


def of_run(info: dict) -> dict[str, dict]:
    return info.get(RunKey.FABRIC_CONFIG) or resolve(info)


def cell(entry: dict) -> str:
    if entry.get("value") is None:
        return f"unknown ({entry.get('reason')})"
    text = str(entry["value"]).lower() if isinstance(entry["value"], bool) else str(entry["value"])
    text += f" ({entry['source']})"
    if entry.get("hosts_read"):
        text += f"; the hosts read {entry['hosts_read']}"
    return text


def report_section(info: dict) -> tuple[str, list[str], list[list[str]]]:
    cfg = of_run(info)
    return ("Fabric configuration (fabric.config, the hosts' own readings, the switch exporter's labels)",
            ["", "value (source) or unknown (why)"], [[k, cell(cfg[k])] for k in KEYS])


def compare_rows(groups_info: list[list[dict]]) -> list[list[str]]:
    """Rows of the comparison's Fabrics table: one per key, a value other than the first fabric's marked."""
    per = [[of_run(i) for i in infos] for infos in groups_info]
    rows = []
    for key in KEYS:
        cells, base = [], None
        for j, cfgs in enumerate(per):
            values = list(dict.fromkeys(cell(c[key]) for c in cfgs))
            text = values[0] if len(values) == 1 else " / ".join(values)
            plain = [c[key].get("value") for c in cfgs]
            if j == 0:
                base = plain
            elif plain != base and any(v is not None for v in plain + base):
                text = "differs: " + text
            cells.append(text)
        rows.append([f"config: {key}"] + cells)
    return rows
