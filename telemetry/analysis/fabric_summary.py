"""What each fabric of a comparison was, from run.json: the rows at the top of a fabric evaluation.

Link rate, interfaces and MTU, NCCL version, transport and GPUDirect RDMA, hosts and duration. A value the
run did not record reads "unknown" with the reason; where repeats of one fabric disagree, each distinct
value is shown.
"""
from __future__ import annotations

import math

import json
import os
import re

from telemetry.analysis.rates import with_bits
from telemetry.analysis.roce_summary import roce_fact
from telemetry.analysis.runs import Run
from telemetry.rundir import LAB, RunKey


def _used_interfaces(fab: dict) -> list[str]:
    """The interfaces or HCAs the job's traffic used: NCCL's devices, else gloo's interface."""
    devices = ((fab.get("nccl") or {}).get("devices")) or []
    names = [d["device"] + (f":{d['port']}" if d.get("port") is not None else "") for d in devices if d.get("device")]
    if names:
        return names
    gloo = (fab.get("gloo") or {}).get("interface")
    return [gloo] if gloo else []


def lab_tbf_drops(run: Run) -> tuple[int | None, int | None]:
    """Packets the lab's shaped queues dropped in the run, in all and once its first step was recorded
    (launch.lab's lab.json, read from tc before tear-down); None where the run has no such record."""
    return lab_tbf_drops_at(run.path)


def lab_tbf_drops_at(run_dir: str) -> tuple[int | None, int | None]:
    """lab_tbf_drops of the run directory `run_dir` (telemetry watch reads it while the run goes on)."""
    try:
        with open(os.path.join(run_dir, LAB), encoding="utf-8") as f:
            info = json.load(f)
        drops, after = info.get("tbf_drops"), info.get("tbf_drops_after_first_step")
    except (OSError, ValueError, AttributeError):
        return None, None
    return (drops if isinstance(drops, int) else None), (after if isinstance(after, int) else None)


# the kernel keeps a tbf bucket as the time it takes to fill at the rate, in 32 bits of 64 ns ticks (iproute2's
# tc_calc_xmittime with /proc/net/psched's 64 ns tick): 2**32 x 64 ns = 274.9 s. A longer one wraps silently
# (tc 6.1 on this host: `rate 476bit burst 16384` shows `burst 166b`, less than a frame: no frame passes)
TBF_MAX_BUCKET_S = 274.0
TBF_MAX_BYTES = 2 ** 32 - 1  # tc keeps a tbf's burst and queue limit in 32 bits (bytes)


def tbf_max_bucket_bytes(rate_bps: float) -> int:
    """The largest tbf bucket tc holds at a rate without wrapping (TBF_MAX_BUCKET_S of the rate, in the whole bytes
    per second tc shapes at: `rate 100bit` is 12 bytes/s, shown as 96bit)."""
    return int(math.floor(rate_bps / 8) * TBF_MAX_BUCKET_S)


def lab_burst_bytes(rate_bps: float, mtu: int | None = None) -> int:
    """The fabric lab's tbf burst at a rate (launch/lab.py burst_bytes, the rule it shapes with): 2 ms at the
    rate, at least 16 KiB and one frame; below 480 bit/s 16 KiB takes longer to fill than tc can hold, so there
    it is what tc holds (still at least one frame: a rate at which one frame cannot be held, the lab refuses), and
    never above tc's 32 bits (2 ms is more from 17.2 Tbit/s)."""
    frame = int(mtu or 1500) + 14
    return max(min(max(int(rate_bps / 8 * 0.002), 16 * 1024), tbf_max_bucket_bytes(rate_bps), TBF_MAX_BYTES), frame)


def lab_slowest_link(lab: dict) -> tuple[float | None, float | None, str]:
    """The rate (bits/s) a lab run's collectives waited on, its tbf burst (bytes) and how to say it. A ring
    crosses every node's egress, so with `--slow-node` the slow egress paced them all: a 2-node run at 100mbit
    with node 1 at 2mbit stepped as fast as one at 2mbit everywhere. A broadcast need not: the slow node only
    receives it where it forwards to no one (3 nodes at 20mbit, node 2 at 2mbit: broadcast of 64 KB from rank
    0 took 43 ms, as with no slow node; line_rate.of_line_text says so). (None, None, why) for an unshaped
    lab."""
    rate, slow = lab.get("rate_bps"), lab.get("slow_rate_bps")
    if slow and (not rate or slow < rate):
        burst = lab.get("slow_burst_bytes") or lab_burst_bytes(slow, lab.get("mtu"))
        # the others unshaped (--rate none): said so, not "none elsewhere"
        others = lab.get("rate") if rate else "unshaped"
        return slow, burst, (f"node {lab.get('slow_node')}'s egress at {lab.get('slow_rate')} (--slow-node), the "
                             f"slowest link ({others} elsewhere)")
    if rate:
        return rate, lab.get("burst_bytes"), f"lab rate {lab.get('rate')}"
    return None, None, "unshaped lab: the veth pair has no line rate"


def lab_links(lab: dict) -> str:
    """A lab's links in a few words: its rate, and the slow node's egress where it has one. A rate in tc's bytes
    per second (`1mbps`) is named in bits too: read as 1 Mbit/s it is off by 8."""
    links = with_bits(lab.get("rate"), lab.get("rate_bps")) if lab.get("rate_bps") else "unshaped"
    if lab.get("slow_rate_bps"):
        links += f", node {lab.get('slow_node')}'s egress {with_bits(lab.get('slow_rate'), lab.get('slow_rate_bps'))}"
    return links


def given_bucket(lab: dict) -> tuple[int | None, int | None]:
    """The tbf burst and queue in bytes that --burst and --limit gave (None where the lab sized it): every shaped
    link's, the slow node's where --rate none shapes no other (its burst_bytes and queue_bytes are then null)."""
    burst = (lab.get("burst_bytes") or lab.get("slow_burst_bytes")) if lab.get("burst_given") else None
    queue = (lab.get("queue_bytes") or lab.get("slow_queue_bytes")) if lab.get("limit_given") else None
    return (burst if isinstance(burst, int) else None), (queue if isinstance(queue, int) else None)


def lab_bucket_text(lab: dict) -> str:
    """'; tbf burst 1514 B, queue 1514 B (--burst, --limit)' where the lab was given its bucket or queue (a
    one-frame queue dropped 10,345 packets in a 10mbit sweep, which the row named without saying why); '' where
    the lab sized them by its own rule."""
    burst, queue = given_bucket(lab)
    given = [(f"burst {burst:,} B", "--burst") if burst else None, (f"queue {queue:,} B", "--limit") if queue else None]
    given = [g for g in given if g]
    if not given:
        return ""
    return f"; tbf {', '.join(g[0] for g in given)} ({', '.join(g[1] for g in given)})"


def lab_row(run: Run) -> list[str] | None:
    """A report's row for a lab run: its links, nodes, topology, MTU and what the shaped queues dropped (the
    interface counters in the run's records never see those drops). None off the lab."""
    lab = (run.info.get("fabric") or {}).get("lab") or {}
    if not lab:
        return None
    shaped = lab.get("rate_bps") or lab.get("slow_rate_bps")
    return ["lab links", f"{lab_links(lab)}; {lab.get('nodes')} nodes, {lab.get('topology')}, MTU {lab.get('mtu')}"
            + lab_bucket_text(lab) + (f"; {_tbf_drops(run)} (lab.json)" if shaped else "")]


def _tbf_drops(run: Run) -> str:
    return lab_drops_text(run.path)


def lab_drops_text(run_dir: str) -> str:
    """What the lab's shaped queues dropped, in words (lab.json; 'queue drops not recorded' before the lab's
    tear-down wrote them)."""
    drops, after = lab_tbf_drops_at(run_dir)
    if drops is None:
        return "queue drops not recorded"
    if drops == 0:
        return "no queue drops"
    if after == 0:  # node 0's start-up broadcast of the model to every peer at once: the steps were not slowed
        return f"queues dropped {drops:,} packets at start-up, none during the steps"
    if after is not None:
        return f"queues dropped {after:,} packets during the steps ({drops:,} in all): TCP retransmitted them"
    return f"queues dropped {drops:,} packets: TCP retransmitted them"


def _link_rate(fab: dict, used: list[str], run: Run) -> str:
    lab = fab.get("lab") or {}
    if lab:
        shaped = lab.get("rate_bps") or lab.get("slow_rate_bps")
        return (f"{lab_links(lab)} (emulated: tc tbf{lab_bucket_text(lab)}; {_tbf_drops(run)})" if shaped
                else "unshaped (emulated lab)")
    hcas = {h["device"]: h for h in fab.get("hcas") or []}
    rates = [hcas[u.split(":")[0]].get("rate") for u in used if u.split(":")[0] in hcas]
    if any(rates):
        return ", ".join(r for r in rates if r)
    nics = {i["name"]: i for i in fab.get("interfaces") or []}
    speeds = [nics[u]["speed_mbps"] for u in used if u in nics and nics[u].get("speed_mbps")]
    if speeds:
        return ", ".join(f"{s / 1000:g} Gbit/s" if s >= 1000 else f"{s} Mbit/s" for s in speeds)
    if not used:
        return "unknown (no interface recorded as used)"
    if used == ["lo"]:
        return "n/a (loopback: every rank on one host)"
    return f"unknown ({', '.join(used)} reports no speed)"


def line_rate_bps(run: Run) -> tuple[float | None, str]:
    """The rate of one link the job's traffic used, in bits per second, and where it comes from: the
    lab's tc rate, the used HCA port's rate, the used interface's speed. (None, why) where unknown."""
    fab = run.info.get("fabric") or {}
    lab = fab.get("lab") or {}
    if lab:
        bps, _, why = lab_slowest_link(lab)
        return bps, why
    used = _used_interfaces(fab)
    hcas = {h["device"]: h for h in fab.get("hcas") or []}
    rates = {hcas[u.split(":")[0]].get("rate") for u in used if u.split(":")[0] in hcas} - {None}
    parsed = {float(m.group(1)) * 1e9 for r in rates if (m := re.match(r"\s*([\d.]+)\s*Gb/sec", str(r)))}
    if len(parsed) == 1:
        return parsed.pop(), f"HCA port rate {rates.pop()}"
    nics = {i["name"]: i for i in fab.get("interfaces") or []}
    gloo = fab.get("gloo") or {}
    speeds = {nics[u]["speed_mbps"] for u in used if u in nics and nics[u].get("speed_mbps")}
    if not speeds and gloo.get("speed_mbps"):
        speeds = {gloo["speed_mbps"]}
    if len(speeds) == 1:
        return speeds.pop() * 1e6, "interface speed (sysfs)"
    if len(parsed) > 1 or len(speeds) > 1:
        return None, "the used links differ in rate"
    if "nccl_tests" in run.info:
        return None, "an nccl-tests table does not name its link rate (give --line-rate LABEL=RATE)"
    return None, "no link rate recorded for the interfaces used"


def _interfaces(fab: dict, used: list[str]) -> str:
    if not used:
        return "unknown (no interface recorded as used)"
    nics = {i["name"]: i for i in fab.get("interfaces") or []}
    parts = []
    for u in used:
        mtu = (nics.get(u) or {}).get("mtu")
        parts.append(f"{u} (MTU {mtu})" if mtu else f"{u} (MTU unknown: not in the interface list)")
    return ", ".join(parts)


def _nccl_version(run: Run, fab: dict) -> str:
    nccl = fab.get("nccl") or {}
    version = fab.get("nccl_version") or nccl.get("nccl_version") or (run.info.get("software") or {}).get("nccl")
    if version:
        return str(version)
    backend = fab.get("backend") or run.info.get("backend")
    if backend == "gloo":
        return "not used (gloo)"
    return f"unknown ({(nccl.get('unknown') or {}).get('nccl_version', 'not recorded')})"


def _transport(fab: dict) -> str:
    transport = fab.get("transport") or "unknown"
    nccl = fab.get("nccl")
    if not nccl:
        return f"{transport}; GDR n/a ({fab.get('backend') or 'no NCCL log'})"
    gdr = nccl.get("gpudirect_rdma")
    why = (nccl.get("unknown") or {}).get("gpudirect_rdma")
    gdr_text = {True: "GDR on", False: "GDR off"}.get(gdr, f"GDR unknown ({why or 'not in the log'})")
    # NCCL's WARN lines by kind (telemetry/capture/nccl_warnings.py): a transport that worked only after errors
    kinds = (nccl.get("warnings") or {}).get("by_kind") or {}
    warned = "; NCCL WARN lines: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    # torch's ProcessGroupNCCL lines (telemetry/capture/torch_nccl_errors.py): a collective that timed out, an error
    torch = nccl.get("torch_errors") or {}
    timeouts = [f"{t['op']} SeqNum {t['seq']}" for t in torch.get("timeouts") or []]
    errors = [e["error"] for e in torch.get("nccl_errors") or []]
    return (f"{transport}; {gdr_text}" + (warned if kinds else "")
            + ("; torch watchdog timeouts: " + ", ".join(timeouts) if timeouts else "")
            + ("; torch NCCL errors: " + ", ".join(errors) if errors else ""))


def _hosts(run: Run) -> str:
    names = list(dict.fromkeys(h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")))
    if not names:
        return "unknown (no hosts in run.json)"
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    return f"{len(names)}: {shown}"


def _devices(run: Run) -> str:
    """The accelerators: `16 x NVIDIA H100 80GB HBM3` (an nccl-tests table's `#  Rank` lines, or run.json)."""
    names = [d.get("name") for d in run.info.get("devices") or [] if d.get("name")]
    if names:
        counts = {n: names.count(n) for n in dict.fromkeys(names)}
        return ", ".join(f"{c} x {n}" for n, c in counts.items())
    dev = run.info.get("device") or {}
    world = (run.info.get("layout") or {}).get("world_size")
    if dev.get("name"):
        return f"{world} x {dev['name']}" if world else dev["name"]
    if dev.get("type"):
        return f"{world} x {dev['type']}" if world else dev["type"]
    return "unknown (no device in run.json)"


def _duration(run: Run) -> str:
    d = run.info.get(RunKey.DURATION_S)
    if d is None:
        return f"unknown (status {run.info.get('status')}: no end recorded)"
    return f"{d:,.0f} s" if d >= 100 else f"{d:.3g} s"


def facts(run: Run) -> dict[str, str]:
    """The fabric rows for one run, as text."""
    fab = run.info.get("fabric") or {}
    used = _used_interfaces(fab)
    return {"link rate": _link_rate(fab, used, run), "interfaces (MTU)": _interfaces(fab, used),
            "NCCL version": _nccl_version(run, fab), "transport; GPUDirect RDMA": _transport(fab),
            "RoCE GID; traffic class": roce_fact(run),
            "hosts": _hosts(run), "devices": _devices(run), "duration": _duration(run)}


def fabric_rows(groups: list[list[Run]]) -> list[list[str]]:
    """One row per fact, one column per fabric; repeats that differ show each distinct value."""
    per_group = [[facts(r) for r in runs] for runs in groups]
    rows = [["runs"] + [f"{len(runs)}: " + ", ".join(os.path.basename(os.path.normpath(r.path)) for r in runs)
                        for runs in groups]]
    rows += [[key] + [merged_cell(group, key) for group in per_group] for key in per_group[0][0]]
    return rows


def merged_cell(group: list[dict], key: str) -> str:
    """One fabric's cell for a fact: its value, or each distinct value of its repeats joined by " / "."""
    values = list(dict.fromkeys(f[key] for f in group))
    return values[0] if len(values) == 1 else " / ".join(values)



# ---------------------------------------------------------------- the workload

def _layout_text(lay: dict) -> str:
    if not lay.get("dp"):
        return "n/a (a collective sweep: no data or model parallelism)"
    text = f"dp {lay['dp']} x tp {lay.get('tp', 1)} x pp {lay.get('pp', 1)}"
    return text + (f" ({lay['data_parallel']})" if lay.get("data_parallel") else "")


def _batch_text(lay: dict) -> str:
    gbs = lay.get("global_batch_size")
    if not gbs:
        return "n/a (no batch: a collective sweep)"
    parts = [f"micro-batch {lay[k]}" if k == "micro_batch_size" else f"grad-accum {lay[k]}"
             for k in ("micro_batch_size", "grad_accum_steps") if lay.get(k)]
    return f"{gbs}" + (f" = {' x '.join(parts)} x dp {lay.get('dp')}" if parts and lay.get("dp") else "")


def _model_text(recipe: dict) -> str:
    model = recipe.get("model") or {}
    if model.get("path"):
        return os.path.basename(os.path.normpath(str(model["path"])))
    if model.get("arch"):
        return str(model["arch"])
    if model.get("config"):
        return "random init from a config" + (f" ({model['config']})" if isinstance(model["config"], str) else "")
    return "n/a (not in run.json)"


def _sizes_text(sweep: dict | None) -> str:
    from telemetry.analysis.compare_figures import size_text
    sizes = sorted({r["size"] for op in (sweep or {}).get("ops", {}).values() for r in op.get("rows") or []})
    return f"{size_text(sizes[0])} - {size_text(sizes[-1])} ({len(sizes)} sizes)" if sizes else "n/a"


def workload_facts(run: Run, sweep: dict | None = None) -> dict[str, str]:
    """What ran, as text: workload, model, world size, layout (dp x tp x pp), global batch, sequence length
    (a training run) or collectives and sizes (a sweep)."""
    recipe = run.info.get("recipe") or {}
    lay = run.info.get("layout") or {}
    world = lay.get("world_size")
    hosts = len({h.get("hostname") for h in run.info.get("hosts") or [] if h.get("hostname")}) or None
    where = f"{world} ranks" if world else "unknown (not recorded)"
    if world and hosts:
        where += f" on {hosts} host{'s' if hosts > 1 else ''}"
    if "nccl_tests" in run.info or recipe.get("workload") == "collectives" or sweep is not None and not recipe:
        sweep = sweep or run.info.get("nccl_tests") or {}
        tests = [op.get("test") or name for name, op in (sweep.get("ops") or {}).items()]
        kind = "nccl-tests" if "nccl_tests" in run.info else "collective sweep"
        return {"workload": f"{kind}: {', '.join(dict.fromkeys(tests)) or 'no table'}", "world size": where,
                "message sizes": _sizes_text(sweep), "data type": str(sweep.get("dtype") or "unknown")}
    workload = recipe.get("workload") or "unknown"
    data = recipe.get("data") or {}
    if workload == "image_classification":
        seq = f"n/a (images, {data.get('image_size')} px)" if data.get("image_size") else "n/a (images)"
    else:
        seq = str(data["seq_len"]) if data.get("seq_len") else "unknown (no data.seq_len in run.json)"
    steps = (run.info.get("final") or {}).get("steps") or len(run.metrics)
    return {"workload": f"{workload} (recipe {recipe.get('name') or run.name})", "model": _model_text(recipe),
            "world size": where, "layout": _layout_text(lay), "global batch": _batch_text(lay),
            "sequence length": seq, "steps recorded": str(steps)}


def workload_rows(groups: list[list[Run]], sweeps: list[dict | None] | None = None) -> list[list[str]]:
    """One row per fact, one column per fabric (repeats that differ show each distinct value)."""
    sweeps = sweeps or [None] * len(groups)
    per_group = [[workload_facts(r, sw) for r in runs] for runs, sw in zip(groups, sweeps)]
    keys = list(dict.fromkeys(k for g in per_group for f in g for k in f))
    rows = []
    for key in keys:
        cells = []
        for group in per_group:
            values = list(dict.fromkeys(f.get(key, "n/a") for f in group))
            cells.append(values[0] if len(values) == 1 else " / ".join(values))
        rows.append([key] + cells)
    return rows


def workload_line(rows: list[list[str]]) -> str:
    """The report's header line: the facts every fabric shares, and which ones differ."""
    same = [r[1] if r[0] == "workload" else f"{r[0]} {r[1]}" for r in rows
            if len(set(r[1:])) == 1 and r[0] != "steps recorded"]
    differ = [r[0] for r in rows if len(set(r[1:])) > 1 and r[0] != "steps recorded"]
    line = "; ".join(same)
    if differ:
        line += f"; differs between fabrics: {', '.join(differ)} (see Workload)"
    return line
