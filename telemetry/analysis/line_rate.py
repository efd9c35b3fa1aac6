"""The line rate a job's traffic had on each host: the NICs it used there times their rates.

A host with 8 NICs of 400 Gbit/s gives an inter-node collective 3.2 Tbit/s; busbw held against one of them
reads "677% of line rate". The NICs used are NCCL's device list (its "NET/IB : Using [0]mlx5_0:1/RoCE ..."
line: every NIC it stripes channels over), else gloo's one interface; their rates come from each host's
inventory (`/sys/class/infiniband/*/ports/1/rate`), else the HCA list and interface speeds in run.json's
fabric record. Hosts that differ give the smallest host (the one the collective waits for).
"""
from __future__ import annotations

import math

import re
from dataclasses import dataclass, field

from telemetry.analysis.fabric_summary import lab_slowest_link, line_rate_bps
from telemetry.analysis.runs import Run
from telemetry.analysis.rates import bits_text

_GBPS = re.compile(r"\s*([\d.]+)\s*Gb/sec")
_COUNT = re.compile(r"^\s*(\d+)\s*[x*]\s*(\S+)\s*$", re.I)


@dataclass(frozen=True)
class LineRate:
    """Per host: `nic_bps` the rate of each NIC used (one value where they agree), `nics` how many."""
    nic_bps: float | None
    nics: int
    why: str
    per_nic: dict[str, float | None] = field(default_factory=dict)  # NIC -> bits/s, the first host's
    # the lab's tc token bucket (bytes): after an idle moment that much passes at the host's speed, so a
    # sweep's small sizes read above the rate (1mbit, 16 KB burst: send/recv of 2 KB at 150%)
    burst_bytes: float | None = None
    # a lab with --slow-node: the line rate is that node's egress, the slowest link; traffic the node does not send
    # (a broadcast from a root elsewhere) never crosses it. Its node, and the other links' rate (None: unshaped)
    slow_node: int | None = None
    other_bps: float | None = None

    @property
    def total_bps(self) -> float | None:
        if self.per_nic and all(self.per_nic.values()):
            return sum(self.per_nic.values())
        return self.nic_bps * self.nics if self.nic_bps else None


def _rate_bps(text) -> float | None:
    m = _GBPS.match(str(text or ""))
    return float(m.group(1)) * 1e9 if m else None


def used_nics(fab: dict) -> list[str]:
    """The NICs (RDMA devices with their port, or interfaces) NCCL or gloo used, as named in its log."""
    devices = ((fab.get("nccl") or {}).get("devices")) or []
    names = list(dict.fromkeys(d["device"] + (f":{d['port']}" if d.get("port") is not None else "")
                               for d in devices if d.get("device")))
    if names:
        return names
    gloo = (fab.get("gloo") or {}).get("interface")
    return [gloo] if gloo else []


def _rates_from_inventory(inv: dict, used: list[str]) -> dict[str, float | None]:
    nics = inv.get("nics") or []
    out = {}
    for u in used:
        dev = u.split(":")[0]
        nic = next((n for n in nics if dev in (n.get("rdma_device"), n.get("interface"))), None)
        out[u] = _rate_bps(nic.get("rate")) if nic else None
    return out


def _rates_from_fabric(fab: dict, used: list[str]) -> dict[str, float | None]:
    hcas = {h.get("device"): h for h in fab.get("hcas") or []}
    ifs = {i.get("name"): i for i in fab.get("interfaces") or []}
    gloo = fab.get("gloo") or {}
    out = {}
    for u in used:
        dev = u.split(":")[0]
        bps = _rate_bps((hcas.get(dev) or {}).get("rate"))
        if bps is None and (ifs.get(dev) or {}).get("speed_mbps"):
            bps = ifs[dev]["speed_mbps"] * 1e6
        if bps is None and dev == gloo.get("interface") and gloo.get("speed_mbps"):
            bps = gloo["speed_mbps"] * 1e6
        out[u] = bps
    return out


def job_line_rate(run: Run) -> LineRate:
    """The NICs the job used per host x their rates; one link's rate (lab, single NIC) as before."""
    fab = run.info.get("fabric") or {}
    used = used_nics(fab)
    if fab.get("lab") or len(used) <= 1:
        bps, why = line_rate_bps(run)
        lab = fab.get("lab") or {}
        burst = lab_slowest_link(lab)[1] if lab else None
        slow = lab.get("slow_node") if lab.get("slow_rate_bps") else None
        return LineRate(bps, 1, why, {used[0]: bps} if used and bps else {}, burst_bytes=burst, slow_node=slow,
                        other_bps=lab.get("rate_bps") if slow is not None else None)
    hosts = run.info.get("inventory") or {}
    per_host = {h: _rates_from_inventory(inv, used) for h, inv in hosts.items()}
    per_host = {h: r for h, r in per_host.items() if all(r.values())}
    if per_host:
        host, rates = min(per_host.items(), key=lambda kv: sum(kv[1].values()))
        totals = {sum(r.values()) for r in per_host.values()}
        source = "NCCL's device list; rates from the inventory" + (
            f" (hosts differ: {host}, the smallest, is used)" if len(totals) > 1 else "")
    else:
        rates = _rates_from_fabric(fab, used)
        source = "NCCL's device list; rates from run.json's HCA list"
        if not all(rates.values()):
            missing = [u for u, r in rates.items() if not r]
            return LineRate(None, len(used), f"{len(used)} NICs used, no rate recorded for {', '.join(missing)}",
                            rates)
    distinct = set(rates.values())
    nic_bps = distinct.pop() if len(distinct) == 1 else None
    return LineRate(nic_bps, len(used), f"{len(used)} NICs per host: {source}", rates)


def parse_given(text: str, what: str) -> LineRate:
    """--line-rate's value: RATE (the host's one NIC) or N x RATE (N NICs per host, e.g. 8x400gbit)."""
    from telemetry.analysis.rates import parse_rate
    m = _COUNT.match(text)
    count, rate = (int(m.group(1)), m.group(2)) if m else (1, text)
    bps = parse_rate(rate, what)
    if bps is None:
        return LineRate(None, count, "'none' has no line rate")
    return LineRate(bps, max(count, 1), "--line-rate")


def _burst_explains(share: float, rate: LineRate, size: float | None) -> bool:
    """Whether the lab's token bucket can explain busbw above the rate: a transfer takes at least (bytes -
    burst) / rate, so at `size` (None: an average over sizes) the share is at most size / (size - burst)."""
    if not rate.burst_bytes:
        return False
    return size is None or size <= rate.burst_bytes or share <= 1.05 * size / (size - rate.burst_bytes)


def burst_text(burst_bytes: float) -> str:
    """The tc bucket as a person reads it: 16 KiB, 64 KiB (65,549 B printed 64.0127 KiB), 23.8 MiB."""
    if burst_bytes >= 2 ** 20:
        return f"{burst_bytes / 2 ** 20:.3g} MiB"
    return f"{burst_bytes / 1024:.3g} KiB"


def of_line_text(gbps: float | None, rate: LineRate | None, size: float | None = None) -> str:
    """'; 84.6% of line rate' for one NIC; with several, against all of them, and what one NIC carries."""
    total = rate.total_bps if rate else None
    if gbps is None or not total:
        return ""
    if gbps == 0:  # nccl-tests' two decimals of GB/s: 0.00 is a rate under 5 MB/s, not none
        return "; share of line rate unknown (0.00 GB/s as printed: under its two decimals)"
    share = gbps * 8e9 / total
    # above 100%: the rate is not the link the traffic crossed, or busbw counts intra-host hops too
    text = f"; {share * 100:.1f}% of line rate"
    if rate.nics > 1:
        text += (f" ({rate.nics} NICs: {gbps / rate.nics * 8:.3g} Gbit/s per NIC"
                 + (f" of {rate.nic_bps / 1e9:g}" if rate.nic_bps else "") + ")")
    # the slow link is one node's egress, not every transfer's: where the bucket cannot explain the share at this
    # size (an average over sizes: it may, name both)
    if share > 1.05 and rate.slow_node is not None and (size is None or not _burst_explains(share, rate, size)):
        other = (f"{gbps * 8e9 / rate.other_bps * 100:.1f}% of the other links' {bits_text(rate.other_bps)}"
                 if rate.other_bps else "the other links are unshaped")
        burst = (f"; the tc burst of {burst_text(rate.burst_bytes)} also passes at the host's speed"
                 if size is None and rate.burst_bytes else "")
        # and a collective's time is the mean over its ranks (nccl-tests' -a default): in a send/recv ring on 4
        # nodes only 2 ranks wait on node 0's egress, the other 2 finish at the healthy rate and pull the mean up
        return text + (f" (above the slow link's rate: it is node {rate.slow_node}'s egress, which traffic that node "
                       "does not send, such as a broadcast from another node's rank, never crosses; and a time averaged "
                       "over the ranks (sweep.time_reduction avg) counts the ranks whose transfers avoid it at the "
                       f"healthy rate: {other}{burst})")
    if share > 1.05 and _burst_explains(share, rate, size):  # the lab's token bucket, not a wrong rate
        return text + (f" (above the line rate: the links' tc burst of {burst_text(rate.burst_bytes)} passes at the "
                       "host's speed after an idle moment, so small messages beat the rate)")
    if share < 0.95 and rate.burst_bytes and size is not None and size <= rate.burst_bytes:
        # the bucket refills at the rate and each transfer fits it: below the rate it never ran dry, so the tbf held
        # no packet. A 100gbit lab (25 MB burst) read "7.8% of line rate" at 4 MB with nothing said: the host's veth
        # and copies, not the link
        return text + (f" (within the links' tc burst of {burst_text(rate.burst_bytes)}, below the rate: the tbf "
                       "held no packet, so the host's own speed set this, not the shaped rate)")
    return text + (" (ABOVE the line rate: check the rate)" if share > 1.05 else "")


def backend_note(op: str, backend: str | None, world: int | None = None) -> str:
    """Why a collective's busbw reads below the link by the backend's own algorithm, not the fabric: gloo runs
    reduce_scatter as an all_reduce of the whole buffer (telemetry/capture/collectives.py), so each rank puts
    about 2(n-1)/n x S on the wire where nccl-tests' busbw counts (n-1)/n x S: half the link at best. gloo
    broadcasts along a binomial tree of whole buffers (gloo/broadcast.cc, which torch's ProcessGroupGloo calls:
    https://github.com/facebookincubator/gloo/blob/main/gloo/broadcast.cc): the root sends ceil(log2 n) times and
    a rank forwards only once it has received all of it, where busbw (= algbw) assumes a pipeline at the link's
    rate: lab round 9, 6 nodes at 50 Mbit/s, read 36-56% beside all_gather's 82-98%; 3 nodes (round 7) 82%."""
    if op == "reduce_scatter" and backend == "gloo":
        return (" (gloo runs reduce_scatter as an all_reduce of the whole buffer: twice the bytes nccl-tests' busbw "
                "counts cross the link, so about half the line rate is the most it can read; all_reduce at the "
                "same sizes measures the link)")
    if op == "broadcast" and backend == "gloo" and world and world >= 3:
        hops = math.ceil(math.log2(world))
        return (f" (gloo broadcasts along a binomial tree of whole buffers: on {world} ranks the root sends the "
                f"buffer {hops} times through its link and each rank forwards it only once it holds all of it, so "
                "busbw falls as ranks are added, where a pipelined broadcast keeps the link's rate; all_reduce at the "
                "same sizes measures the link)")
    return ""


def describe(rate: LineRate) -> str:
    """The line-rate row's cell: '8 x 400 Gbit/s = 3.2 Tbit/s per host (...)'."""
    from telemetry.analysis.compare_figures import rate_text
    total = rate.total_bps
    if not total:
        return f"unknown: {rate.why}"
    if rate.nics > 1:
        each = (f"{rate.nics} x {bits_text(rate.nic_bps)}" if rate.nic_bps else
                " + ".join(bits_text(b) for b in rate.per_nic.values()))
        return f"{each} = {bits_text(total)} per host ({rate_text(total / 8e9)}; {rate.why})"
    return f"{bits_text(total)} ({rate_text(total / 8e9)}; {rate.why})"
