"""Projecting a measured run's iteration time onto a fabric not at hand.

From one run we know, per step (medians over timed steps): the step time T, and per collective type
its bytes S (nccl-tests' size) and measured time t - taken on the rank that waited least (the cross-rank
minimum), since the others' extra time is waiting for a late peer, not communication. On a link of bandwidth B (bytes/s) a collective
over n ranks moves S x factor(n) bytes over its busiest link - that is what busbw means - so it takes

    t'(op) = L(op) + S x factor(n) / (B x efficiency)

where L(op) is the part of the measured time that does not scale with bandwidth (per-call software
overhead and latency: t - S x factor / (B_measured x efficiency), or all of t when the measured run's
links were not shaped) plus `latency_s` x calls where a latency for the new fabric is given.

Overlap: every step records its communication time C (wall time with a call in flight), its exposed part E
(the per-step estimate, capped at the least-waiting rank's C: rank 0's wait for a late peer may have been
hidden) and its overlap window V (backward compute with asynchronous calls in flight).
Communication can hide behind at least what hid (C - E) and at most V; the rest is exposed, and at least
the measured exposed share of it (the last buckets, issued when nothing is left to compute):

    T' = (T - E) + max(C' - max(C - E, V), C' x E / C)

Shaped links (the lab's tbf, cloud shapers) hold a token bucket: after idling through the step's
compute, up to `burst` bytes pass at once, so only the rest waits for the rate.

A run without the estimate (NCCL: device-timed) takes E from profiled windows, else all of C (an upper
bound). `efficiency` is the fraction of the line rate a collective achieves at large sizes: measure it
with a sweep on the target fabric (bench/) or take the default, measured for gloo over tbf links on
the development machines (all_reduce and send/recv busbw 92-96% of the shaped rate).

Another node count (`nodes`): the bytes of each collective stay (gradients do not grow with the world),
the bus factor changes (all_reduce 2(n-1)/n), and forward and backward follow each rank's share of the
global batch (the recipe's global batch is kept, as a re-run of the recipe on more nodes would); the
replicated optimizer step (`optimizer_s`) does not shrink. The bandwidth-independent part is kept as
measured: scaling it with the ring's hops (2(n-1) for all_reduce) overestimated 4-node lab steps by 40-50
ms (bench/). In the fabric lab all nodes compute on one host: with more ranks than its cores they
time-share them, so compute is projected ranks/cores slower, and the interval's low end is compute not
slowed.

A target fabric can be an nccl-tests table instead of a rate (`busbw_table`, from `load_busbw_table`):
each call then takes its size x bus factor / the table's busbw at that size (time linear in size between its rows).

The interval: compute varies as the measured steps did (their 10th-90th percentiles around the median,
scaled onto the projected compute), and the wire time over the range of efficiencies collectives reach
(EFFICIENCY_RANGE, sweeps on the lab's links; for a table, 90-100% of its busbw). When the time a target's
links add (bytes over bandwidth) is under 5% of the step, the projection calls communication negligible:
no faster fabric can make that step more than 5% faster.
"""
from __future__ import annotations


from telemetry.formulas import bus_factor
from telemetry.analysis.fabric_summary import lab_slowest_link
from telemetry.analysis.report import summarize
from telemetry.analysis.runs import Run, median, percentile
from telemetry.errors import InputError
from telemetry.rundir import StepKey

DEFAULT_EFFICIENCY = 0.94
# gloo collectives over the lab's tbf links at large sizes, by frame size: tbf counts whole frames, so
# 1500-byte frames leave less of the rate for payload (bench/lab_sweep.py: all_reduce 87-93% at MTU 1500,
# 95-97% at 9000; sendrecv 84-95% and 89-91%); 576-byte frames, the lab's smallest: all_reduce 84.4% and
# sendrecv 86.1% at 10mbit against 93.3% and 96.2% at 1500 in the same session (bench/results/lab_configs.md,
# third round); taken as 0.90, the nearest frame size measured before, its wire time came out about 6% short
LAB_EFFICIENCY = {576: 0.85, 1500: 0.90, 9000: 0.95}
# busbw / shaped rate reached by gloo collectives over the lab's tbf links at large sizes (bench/lab_sweep.py)
EFFICIENCY_RANGE = (0.85, 1.0)
TABLE_RANGE = (0.9, 1.0)
NEGLIGIBLE = 0.05  # communication whose wire time is under this share of the step is called negligible  # an nccl-tests table is a best case: 90-100% of its busbw
# nccl-tests table for each recorded collective type (send and recv are its sendrecv test)
TABLE_OP = {"send": "sendrecv", "recv": "sendrecv"}


class ProjectionError(InputError, ValueError):
    """A projection that cannot be made; one line naming what is missing."""


def measured_profile(run: Run, summary: dict | None = None) -> dict:
    """What the projection needs from a run, as medians over its timed steps (`summary`: the run's
    summarize() result when the caller already has it)."""
    s = summary or summarize(run)
    layout = run.info.get("layout") or {}
    world = layout.get("world_size") or len(run.info.get("hosts") or []) or 1
    lab = (run.info.get("fabric") or {}).get("lab") or {}
    hosts = run.info.get("hosts") or []
    nodes = lab.get("nodes") or len({h.get("hostname") for h in hosts}) or 1
    timed = run.timed_steps()
    ops = {}
    for op, c in s["comm"].items():
        steps = [r for r in timed if op in (r.get(StepKey.COMM) or {})]
        # the rank that arrived last waited least: its time is the collective itself, the others'
        # extra is waiting for it (imbalance, which a faster fabric does not remove)
        last_arrival = median([((r.get(StepKey.RANKS) or {}).get("comm_time_s_by_op") or {}).get(op, {}).get("min")
                               for r in steps])
        t = last_arrival if last_arrival is not None else c["time_per_step_s"]
        # bytes without a time that crossed the measured link stay out, as their time does: it is inside the step
        # as measured, so putting their bytes on the target link counted them twice (a tp 2 x pp 2 lab run's
        # untimed gloo send/recv, 1 MB a step, projected onto its own 50mbit link: +69%). On one node they
        # crossed no link: a target of more nodes carries them
        untimed = (c.get("untimed_bytes_per_step") or 0) if nodes > 1 else 0
        ops[op] = {"bytes": max((c["bytes_per_step"] or 0) - untimed, 0), "time_s": t or 0.0,
                   "calls": median([r[StepKey.COMM][op]["count"] for r in steps]) or 0}
    groups = _group_profile(timed, ops, world)
    summed = sum(o["time_s"] for o in ops.values())
    # wall time with a collective in flight, on the rank that waited least: concurrent calls (DDP's buckets
    # on gloo's two threads, or queued behind each other) count once, as they share the link
    union_min = median([((r.get(StepKey.RANKS) or {}).get(StepKey.COMM_TIME_S) or {}).get("min") for r in timed])
    union_own = median([r.get(StepKey.COMM_TIME_S) for r in timed])
    comm = union_min if union_min is not None else union_own if union_own is not None else summed
    if summed > comm > 0:
        for o in ops.values():
            o["time_s"] *= comm / summed
        for g in groups.values():
            for o in g["ops"].values():
                o["time_s"] *= comm / summed
    comm = min(comm, summed) if summed else comm
    exposed_est = median([r.get(StepKey.EXPOSED_COMM_S) for r in timed])
    exposed_low = None
    if exposed_est is not None:
        # the writing rank's estimate; what it waited for a late peer is not the fabric's. Whether that wait
        # was exposed (early at a blocking call) or hidden (an asynchronous call in flight while it computed:
        # a DDP bucket during the rest of the backward; before 2026-11-28 also the loop's item counts, issued at
        # the step's start) the estimate cannot say: so the exposed part
        # is at most the least-waiting rank's communication and at least the estimate less the whole wait.
        # The first is the projection, the second the interval's low end. Taking the second alone called
        # tp 2 x dp 3 lab baselines 2-4% exposed where rank 0's counts waited during its forward, and hid
        # the dp traffic of 7 and 14 Mbit/s behind tp's backward calls: -17% and -14% (bench/results/lab_groups.md)
        exposed = min(exposed_est, comm)
        exposed_low = max(0.0, exposed_est - max(0.0, (union_own or comm) - comm))
        exposed_from = "estimate"
    elif s["exposed"] and s["step_time_median_s"]:
        exposed, exposed_from = s["exposed"]["share"] * s["step_time_median_s"], "profiled"
    else:
        exposed, exposed_from = comm, "all"
    overlap = median([r.get(StepKey.OVERLAP_WINDOW_S) for r in timed])
    optimizer = median([r.get(StepKey.OPTIMIZER_S) for r in timed])
    times = [r.get(StepKey.STEP_TIME_S) for r in timed]
    med = s["step_time_median_s"]
    spread = ((percentile(times, 0.1) / med, percentile(times, 0.9) / med) if med and len(times) >= 3
              else (1.0, 1.0))
    compute, compute_spread = _compute_of_steps(timed, exposed_from)
    if compute is not None and med and exposed_from == "estimate":
        # The median of the steps' remainders is the better compute where the link holds much of the step (the
        # difference of two large medians is noisy); where it holds little, the median step less the exposed
        # part is as good, and gives the measured step back on the run's own link. The median of per-step
        # remainders need not add up with the median exposed part to the median step: an unshaped 2-node
        # lab run (0.1635 s steps, +-30% between steps, 0.004 s on the link) read 0.1517 s of compute, and
        # a link as fast as its own was "predicted" 5% faster than measured. Weighted by the link's share:
        share = min(max(min(exposed, comm) / med, 0.0), 1.0)
        compute = share * compute + (1.0 - share) * max(med - min(exposed, comm), 0.0)
    # a lab run with --slow-node: its collectives waited on the slow egress, so that is the measured rate
    link_bps, burst, link_note = lab_slowest_link(lab) if lab else (None, None, None)
    link_note = link_note if lab.get("slow_rate_bps") else None
    return {StepKey.STEP_TIME_S: med, StepKey.COMM_TIME_S: comm, "exposed_s": min(exposed, comm),
            "exposed_from": exposed_from,
            "exposed_low_s": min(exposed_low if exposed_low is not None else exposed, comm),
            # compute with asynchronous collectives in flight (None: a run recorded before this was kept)
            StepKey.OVERLAP_WINDOW_S: overlap, StepKey.OPTIMIZER_S: optimizer,
            "ops": ops, "groups": groups, "world_size": world, "nodes": nodes, "link_bps": link_bps,
            "burst_bytes": burst, "link_note": link_note, "label": run.name,
            "workload": (run.info.get("recipe") or {}).get("workload"), "step_spread": spread,
            # the time outside exposed communication, step by step (None: no per-step exposed part)
            "compute_s": compute, "compute_spread": compute_spread,
            "steps": len(times), "dp": layout.get("dp") or world, "global_batch": layout.get("global_batch_size"),
            "micro_batch": layout.get("micro_batch_size"),
            # the lab's nodes share one host's cores (None off the lab: nodes have their own)
            "host_cpus": lab.get("host_cpus"), "mtu": lab.get("mtu"),
            # a fabric lab run (its mtu is recorded from 2026-11-23 on; its rate and burst from before)
            "lab": bool(lab),
            # links each node's ranks share onto the fabric: the lab gives a node one link; elsewhere the RDMA
            # ports NCCL used on rank 0's host (run.json telemetry.rdma_ports), else unknown
            "links_per_node": 1 if lab else _links_of(run),
            # measured times leave out calls without a time: what is projected from them is partial too
            "partial": bool(s.get("comm_partial")), "untimed_bytes": s.get("comm_untimed_bytes_per_step"),
            **_startup(run)}


def _compute_of_steps(timed: list[dict], exposed_from: str) -> tuple[float | None, tuple[float, float] | None]:
    """The time outside exposed communication, step by step: its median and its 10th-90th percentiles over the
    median ((1, 1) under 3 steps); (None, None) where steps do not record their exposed part.

    Read per step, not as median step less median exposed: on a link-bound run (tiny LoRA at 2 Mbit/s, 0.65 s
    steps of which 0.60 s on the link) compute is the small difference of two large figures that move from
    step to step, and the difference of their medians read 0.058 s where the steps' own remainders had a
    median of 0.052 s. Its spread is its own: the step time's relative spread (a few % on a link-bound run)
    put on the compute said +-2% where the steps' compute moved 0.041-0.093 s (bench/results/lab_configs.md,
    fourth round)."""
    if exposed_from == "profiled":
        return None, None
    per = []
    for r in timed:
        t = r.get(StepKey.STEP_TIME_S)
        c = ((r.get(StepKey.RANKS) or {}).get(StepKey.COMM_TIME_S) or {}).get("min")
        c = r.get(StepKey.COMM_TIME_S) if c is None else c
        if t is None or c is None:
            continue
        e = r.get(StepKey.EXPOSED_COMM_S) if exposed_from == "estimate" else None
        per.append(max(t - (c if e is None else min(e, c)), 0.0))
    med = median(per)
    if not med:
        return None, None
    return med, ((percentile(per, 0.1) / med, percentile(per, 0.9) / med) if len(per) >= 3 else (1.0, 1.0))


def _startup(run: Run) -> dict:
    """The start-up broadcast (rank 0 sends the model to every rank: DDP's first broadcast, recorded in run.json
    telemetry.comm_outside_steps) with the backend and the recipe's distributed.timeout_s that bounds it."""
    outside = (run.info.get("telemetry") or {}).get("comm_outside_steps") or {}
    recipe = run.info.get("recipe") or {}
    return {"startup_bytes": (outside.get("broadcast") or {}).get("bytes"),
            "backend": (run.info.get("fabric") or {}).get("backend"),
            "timeout_s": (recipe.get("distributed") or {}).get("timeout_s") if isinstance(recipe, dict) else None}


def startup_notes(profile: dict, link_bps: float | None, efficiency: float, nodes: int, n_new: int) -> list[str]:
    """A note where the target link makes the start-up broadcast take half of distributed.timeout_s or more:
    gloo broadcasts along a binomial tree of whole buffers (gloo/broadcast.cc): node 0 sends the model to
    ceil(log2 n) ranks at once over its one link and each forwards it once it holds all of it, so the last rank
    has it after about one transfer per rank on another node over one link (n-1 for n up to 6 nodes, n-2 at 7 and
    8: taken as n-1); NCCL's pipelined ring: once. In the lab, 1.9 MB to 1 peer at 100kbit and 14 MB to 3
    peers at 1.5mbit failed at start-up with the timeout; 14 MB to 3 peers at 10mbit (about 40 s) ran."""
    size, timeout = profile.get("startup_bytes"), profile.get("timeout_s")
    if not (size and timeout and link_bps):
        return []
    remote = n_new - n_new // max(nodes, 1)
    copies = remote if profile.get("backend") == "gloo" else min(remote, 1)
    took = size * copies * 8 / (link_bps * efficiency)
    if took < 0.5 * timeout:
        return []
    verdict = ("over distributed.timeout_s, so the run would fail at start-up: raise it" if took > timeout else
               "at least half of distributed.timeout_s")
    how = (" (gloo's broadcast tree: node 0 sends it to several ranks at once and each forwards it whole)"
           if copies > 1 else "")
    return [f"start-up: the model ({size / 1e6:.1f} MB) reaches the last rank after {copies} transfer(s) over one "
            f"link{how}, about {took:.0f} s at this rate: {verdict} ({timeout:g} s)"]


def _links_of(run: Run) -> int | None:
    counted = ((run.info.get("telemetry") or {}).get("rdma_ports") or {}).get("counted")
    return (len(counted) or None) if counted is not None else None


def sharing(world: int, size: int, links_per_node: int | None) -> float:
    """How many transfers of an inter-node group's collective share each link of a node, at once. Every
    group of a dimension runs the same collective at the same point of the step (the world / size
    sibling groups: tp 2 x dp 2 on 2 nodes has 2 dp groups), each crossing every node once (its ring's
    one edge out of the node), so a node's links carry world / size of them; spread over the node's
    links. Unknown links (None): one transfer per link, as before groups shared links."""
    if not links_per_node or size >= world:
        return 1.0
    return max(1.0, (world / size) / links_per_node)


def _group_profile(timed: list[dict], ops: dict, world: int) -> dict:
    """Per process group and collective type: bytes, calls and time, medians over the timed steps' `comm_groups`
    ({} for runs recorded before groups: every byte is then taken to cross the fabric, as before). Each
    collective type's time (the cross-rank minimum) is split over its groups as the writing rank's own
    times split it, so the groups add up to the type."""
    names = sorted({n for r in timed for n in (r.get(StepKey.COMM_GROUPS) or {})})
    if not names:
        return {}
    out = {}
    for name in names:
        rows = [r[StepKey.COMM_GROUPS][name] for r in timed if name in (r.get(StepKey.COMM_GROUPS) or {})]
        last = rows[-1]
        # scope unknown (no host map): on the target link, as every byte was before groups
        g = {"dim": last.get("dim"), "size": last.get("size") or world, "scope": last.get("scope") or "inter",
             "scope_known": last.get("scope") is not None, "ops": {},
             "untimed_bytes": median([x.get("untimed_bytes") for x in rows]) or 0}
        for op in sorted({op for x in rows for op in (x.get("by_op") or {})}):
            per = [(x.get("by_op") or {}).get(op) or {} for x in rows]
            # as for the collective types (measured_profile): untimed bytes of a group that crossed the link stay out
            off = g["scope"] == "inter" and g["scope_known"]
            g["ops"][op] = {"bytes": median([max((p.get("bytes") or 0) - ((p.get("untimed_bytes") or 0) if off else 0), 0)
                                             for p in per if p.get("bytes") is not None]) or 0,
                            "own_s": median([p.get("time_s") for p in per]) or 0.0,
                            "calls": median([p.get("count") for p in per]) or 0}
        out[name] = g
    for op, o in ops.items():
        parts = [g["ops"][op] for g in out.values() if op in g["ops"]]
        own = sum(p["own_s"] for p in parts)
        for p in parts:
            p["time_s"] = o["time_s"] * p["own_s"] / own if own else o["time_s"] / len(parts)
    return out


def _units(profile: dict) -> list[dict]:
    """What is projected, one unit per (process group, collective type); a run without groups gives one unit
    per type over the world, all on the target link (its behaviour before groups were recorded)."""
    groups = profile.get("groups") or {}
    if not groups:
        return [{"group": None, "op": op, "scope": "inter", "size": profile["world_size"], **o}
                for op, o in profile["ops"].items()]
    return [{"group": name, "op": op, "scope": g["scope"], "size": g["size"], "dim": g.get("dim"), **o}
            for name, g in groups.items() for op, o in g["ops"].items()]


# what repeats of one configuration must share to be projected together
_SAME = ("workload", "world_size", "nodes", "link_bps", "burst_bytes", "dp", "global_batch", "host_cpus", "mtu")


def combine_profiles(profiles: list[dict]) -> dict:
    """One profile from repeats of the same configuration (recipe, layout, fabric): the median of each
    run's figures, and a step spread wide enough to hold every run's own 10th-90th percentiles. On a
    shared host a run's compute can move 10-20% from one run to the next (bench/RESULTS.md); a single
    run's spread does not show that, the repeats' spread does."""
    if len(profiles) == 1:
        return profiles[0]
    first = profiles[0]
    for key in _SAME:
        values = [p.get(key) for p in profiles]
        if len(set(values)) > 1:
            each = ", ".join(f"{p['label']}: {v}" for p, v in zip(profiles, values))
            raise ProjectionError(f"the runs given together are not repeats of one configuration: {key} differs ({each})")
    if any(p[StepKey.STEP_TIME_S] is None for p in profiles):
        bad = next(p["label"] for p in profiles if p[StepKey.STEP_TIME_S] is None)
        raise ProjectionError(f"{bad}: no timed steps to project from")
    ops_sets = {tuple(sorted(p["ops"])) for p in profiles}
    if len(ops_sets) > 1:
        raise ProjectionError("the runs given together are not repeats of one configuration: their collectives "
                              f"differ ({' / '.join(', '.join(o) or 'none' for o in sorted(ops_sets))})")
    step = median([p[StepKey.STEP_TIME_S] for p in profiles])
    low = min(p["step_spread"][0] * p[StepKey.STEP_TIME_S] for p in profiles) / step
    high = max(p["step_spread"][1] * p[StepKey.STEP_TIME_S] for p in profiles) / step
    out = dict(first)
    for key in (StepKey.COMM_TIME_S, "exposed_s", "exposed_low_s", StepKey.OVERLAP_WINDOW_S, StepKey.OPTIMIZER_S):
        out[key] = median([p.get(key) for p in profiles])
    out["exposed_s"] = min(out["exposed_s"], out[StepKey.COMM_TIME_S])
    if out["exposed_low_s"] is not None:
        out["exposed_low_s"] = min(out["exposed_low_s"], out["exposed_s"])
    out["ops"] = {op: {k: median([p["ops"][op][k] for p in profiles]) for k in ("bytes", "time_s", "calls")}
                  for op in first["ops"]}
    shapes = {tuple(sorted((n, tuple(sorted(g["ops"]))) for n, g in (p.get("groups") or {}).items())) for p in profiles}
    if len(shapes) > 1:
        raise ProjectionError("the runs given together are not repeats of one configuration: their process groups "
                              "differ (or some were recorded before groups were)")
    out["groups"] = {name: {**g, "ops": {op: {k: median([p["groups"][name]["ops"][op][k] for p in profiles])
                                              for k in ("bytes", "time_s", "calls", "own_s")} for op in g["ops"]}}
                     for name, g in (first.get("groups") or {}).items()}
    computes = [p.get("compute_s") for p in profiles]
    if all(c is not None for c in computes):
        # as the step spread: the fastest run's 10th percentile of compute to the slowest's 90th, around the median
        mid = median(computes)
        spreads = [p.get("compute_spread") or (1.0, 1.0) for p in profiles]
        out.update(compute_s=mid, compute_spread=(min(min(s[0] * c for s, c in zip(spreads, computes)) / mid, 1.0),
                                                  max(max(s[1] * c for s, c in zip(spreads, computes)) / mid, 1.0)))
    else:
        out.update(compute_s=None, compute_spread=None)
    out.update(step_time_s=step, step_spread=(min(low, 1.0), max(high, 1.0)),
               steps=sum(p["steps"] for p in profiles), repeats=len(profiles),
               repeat_step_times_s=[p[StepKey.STEP_TIME_S] for p in profiles],
               label=f"{first['label']} (+{len(profiles) - 1} repeat{'s' if len(profiles) > 2 else ''})",
               partial=any(p.get("partial") for p in profiles))
    return out


class BusbwTable(dict):
    """{op: [(size, busbw GB/s), ...]} and, for a fabric lab's own sweep, `lab_link`: (bits/s, tbf burst bytes)
    of the link its calls waited on (None otherwise: a NIC has no token bucket)."""
    lab_link: tuple[float, float] | None = None


def load_busbw_table(path: str) -> BusbwTable:
    """An nccl-tests output file (or a sweep's collectives.txt, or the sweep's run directory) as {op: [(size, busbw
    GB/s), ...]}: the out-of-place block where measured, else the in-place one; rows without a busbw are left out.
    A sweep run in the fabric lab (its run.json says so) carries its link's rate and tc bucket (`lab_link`)."""
    import os

    from telemetry.analysis.nccl_tests import NcclTestsError, block_busbw, read
    from telemetry.rundir import SWEEP_TABLE
    if os.path.isdir(path):  # a sweep's run directory: its table
        if not os.path.isfile(os.path.join(path, SWEEP_TABLE)):
            raise ProjectionError(f"--busbw-table: {path}: a directory without {SWEEP_TABLE} (not a collective sweep's "
                                  "run directory); allowed: an nccl-tests output file (its text or its -J JSON), a "
                                  f"sweep's {SWEEP_TABLE} or its run directory")
        path = os.path.join(path, SWEEP_TABLE)
    try:
        result = read(path)
    except (OSError, NcclTestsError) as exc:
        raise ProjectionError(f"--busbw-table: {exc}") from None
    table = BusbwTable()
    table.lab_link = _table_lab_link(path)
    ranks = result.get("world_size")
    for op, r in result["ops"].items():
        points = []
        for row in r["rows"]:
            block = row.get("out_of_place") or row.get("in_place") or {}
            # a slow link's rows print 0.00 GB/s: the busbw is then read from their time (a lab's own sweep)
            busbw = block_busbw(op, row, block, r.get("world_size") or ranks) if block else None
            if row.get("size") and busbw:
                points.append((float(row["size"]), float(busbw)))
        if points:
            table[op] = sorted(points)
    if not table:
        raise ProjectionError(f"--busbw-table: {path} has no rows with a size and a busbw")
    return table


def _table_lab_link(path: str) -> tuple[float, float] | None:
    """(bits/s, burst bytes) of the lab link a sweep's own table was measured on: its collectives.txt beside the
    run.json that records the lab (python -m launch.lab); None for any other file."""
    import os

    from telemetry.analysis.runs import RunError, read_run_json
    from telemetry.rundir import RUN_JSON, SWEEP_TABLE
    if os.path.basename(path) != SWEEP_TABLE:
        return None
    try:
        info = read_run_json(os.path.join(os.path.dirname(path) or ".", RUN_JSON))
    except RunError:  # none beside it, or damaged: no lab known, no bucket
        return None
    lab = (info.get("fabric") or {}).get("lab") if isinstance(info.get("fabric"), dict) else None
    if not isinstance(lab, dict) or not lab:
        return None
    bps, burst, _ = lab_slowest_link(lab)
    return (float(bps), float(burst)) if bps and burst else None


def busbw_at(points: list[tuple[float, float]], size: float) -> tuple[float, float]:
    """(busbw GB/s, time s of one call of `size` bytes) from a table's points. Between two rows the time is
    linear in size (a latency plus size over bandwidth, as each segment of such a table is); below the
    smallest row a call takes that row's time (latency-bound), above the largest it runs at its busbw."""
    if size <= points[0][0]:
        s0, b0 = points[0]
        return size / (s0 / b0) if size else b0, s0 / (b0 * 1e9)
    if size >= points[-1][0]:
        return points[-1][1], size / (points[-1][1] * 1e9)
    for (s0, b0), (s1, b1) in zip(points, points[1:]):
        if s0 <= size <= s1:
            t0, t1 = s0 / (b0 * 1e9), s1 / (b1 * 1e9)
            t = t0 + (t1 - t0) * (size - s0) / (s1 - s0) if s1 > s0 else t0
            return size / t / 1e9, t
    raise AssertionError("unreachable")


def _credit(burst_bytes: float, link_bps: float | None, idle_s: float) -> float:
    """Bytes a token-bucket-shaped link lets through at once after idling (0 for a NIC at line rate)."""
    if not burst_bytes or not link_bps:
        return 0.0
    return min(burst_bytes, link_bps / 8 * max(idle_s, 0.0))


def _compute_scale(profile: dict, world_new: int) -> tuple[float, float, list[str]]:
    """Factor on compute at another world size (each rank's share of the global batch), the extra factor
    the lab host's cores may add at most, and notes saying so."""
    world = profile["world_size"]
    if world_new == world:
        return 1.0, 1.0, []
    dp = profile.get("dp") or world
    scale = world / world_new  # the global batch is kept: each rank's share shrinks as dp grows
    notes = [f"global batch kept: each rank computes {scale:.2f}x the samples it did at {world} ranks"
             + ("" if dp == world else " (tp and pp kept)")]
    gbs, micro, dp_new = profile.get("global_batch"), profile.get("micro_batch"), dp * world_new // world
    if gbs and micro and gbs % (micro * dp_new):  # the trainer would refuse this layout: say the time is a what-if
        notes.append(f"the recipe's global batch {gbs} does not divide over micro-batch {micro} x dp {dp_new}: a "
                     f"run on {world_new} ranks needs another (train.global_batch_size, a multiple of "
                     f"{micro * dp_new}); projected as if {gbs} samples divided evenly")
    cpus, shared = profile.get("host_cpus"), 1.0
    if cpus:
        shared = max(1.0, world_new / cpus) / max(1.0, world / cpus)
        if shared > 1.0:
            notes.append(f"lab: {world_new} ranks share the host's {cpus} cores: compute projected {shared:.2f}x "
                         "slower (the interval's low end: not slowed)")
        elif shared < 1.0:  # fewer ranks than the measured run time-share the cores: each gets more of them
            notes.append(f"lab: {world_new} ranks share the host's {cpus} cores where {world} did: each rank's "
                         f"compute projected {shared:.2f}x the time of its samples")
    return scale, shared, notes


def efficiency_for(profile: dict) -> float:
    """The busbw / line rate to expect: measured in the lab for its frame size where the run was a lab run
    (the target is taken to have the same frames), else DEFAULT_EFFICIENCY."""
    mtu = profile.get("mtu")
    if not mtu:
        return DEFAULT_EFFICIENCY
    return LAB_EFFICIENCY[min(LAB_EFFICIENCY, key=lambda m: abs(m - mtu))]


def _spans_nodes_on_target(units: list[dict], per_node: int, world_ratio: float) -> dict:
    """For a run measured on one node: which of its (intra-node) groups span nodes on the target, and their size
    there. The harness's mesh is (pp, dp, tp), tp innermost; a bigger world grows dp (`world_ratio`: the
    target's ranks over the run's). A group spans nodes when its members' stride times its size passes the
    target's ranks per node (`per_node`)."""
    sizes = {u.get("dim"): u["size"] for u in units if u["group"] is not None}
    tp = sizes.get("tp", 1)
    dp_new = max(1, round(sizes.get("dp", 1) * world_ratio))
    stride_size = {"tp": (1, tp), "dp": (tp, dp_new), "pp": (tp * dp_new, sizes.get("pp", 1))}
    return {dim: size for dim, (stride, size) in stride_size.items() if dim in sizes and size > 1
            and stride * size > per_node}


def _grow_groups(units: list[dict], n: int, n_new: int, node_ratio: float, links, nodes_measured: int = 0,
                 nodes: int = 0) -> list:
    """Each unit's group size on the target: a group across nodes grows with the node count; one inside a
    node keeps its size; the whole world's (no group) is the new world. A run measured on one node has only
    groups inside it: on more nodes (`nodes`, of n_new / nodes ranks each) those that span them
    (_spans_nodes_on_target) go onto the target link, their measured traffic counted as none of it on a link
    (`from_intra`). And how many transfers share a node's link at once, measured and on the target
    (sharing()). Returns notes."""
    notes = []
    spans = (_spans_nodes_on_target(units, n_new // nodes, n_new / n) if nodes_measured == 1 and nodes > 1 else {})
    for u in units:
        u["from_intra"] = False
        if u["group"] is None:
            u["size_new"] = n_new
        elif u["scope"] == "inter":
            u["size_new"] = max(1, round(u["size"] * node_ratio))
        elif u.get("dim") in spans:
            u.update(size_new=spans[u["dim"]], scope="inter", from_intra=True)
        else:
            u["size_new"] = u["size"]
        inter = u["group"] is not None and u["scope"] == "inter"
        u["share_measured"] = sharing(n, u["size"], links) if inter and not u["from_intra"] else 1.0
        u["share_new"] = sharing(n_new, u["size_new"], links) if inter else 1.0
    for dim, size in sorted(spans.items()):
        was = next(u["size"] for u in units if u.get("dim") == dim)
        notes.append(f"the {dim} group (size {was}, inside the one node measured) spans nodes on the target (size "
                     f"{size}): its traffic goes onto the target link, timed from its bytes")
    return notes


def _add_unit(per_op: dict, by_group: dict, u: dict, figures: dict) -> None:
    """One unit's bytes and times added to its collective's and its group's totals."""
    o = per_op.setdefault(u["op"], {k: 0 if k == "bytes" else 0.0 for k in figures})
    for k, v in figures.items():
        o[k] += v
    if u["group"] is not None:
        g = by_group.setdefault(u["group"], {"dim": u.get("dim"), "scope": u["scope"], "size": u["size"],
                                             "size_new": u["size_new"], "on_target_link": u["scope"] == "inter",
                                             "link_sharing": u["share_new"],
                                             **{k: 0 if k == "bytes" else 0.0 for k in figures if k != "fixed_s"}})
        for k, v in figures.items():
            if k != "fixed_s":
                g[k] += v


def _target_credit(busbw_table: dict | None, burst_bytes: float, link_bps: float | None, idle_s: float,
                   notes: list) -> float:
    """Bytes of a step that pass the target's token bucket at once: a --rate target's (the lab at that rate), or
    a table's from the fabric lab's own sweep (`lab_link`). That sweep ran its calls back to back, its tc bucket
    empty; a training step's compute refills it (a 3-node 5mbit run projected onto its lab's sweep read +4.8%
    slow without it). A NIC's table has no bucket."""
    table_link = getattr(busbw_table, "lab_link", None)
    if not table_link:
        return _credit(burst_bytes, link_bps, idle_s)
    notes.append(f"the table is the fabric lab's own sweep: its tc bucket ({table_link[1]:.0f} bytes at "
                 f"{table_link[0] / 1e6:g} Mbit/s) refills while the step computes, which the sweep's back-to-back "
                 "calls never let it")
    return _credit(table_link[1], table_link[0], idle_s)


def _table_wire_s(busbw_table: dict, u: dict, wire_target: float, notes: list) -> float:
    """A unit's time on the wire at the busbw a table gives at its calls' size (the table's time already holds
    the fabric's latency); all_reduce's table for a collective it lacks."""
    op = u["op"]
    points = busbw_table.get(TABLE_OP.get(op, op)) or busbw_table.get("all_reduce")
    if points is None:
        raise ProjectionError(f"--busbw-table: no {TABLE_OP.get(op, op)} or all_reduce table for the "
                              f"run's {op}; the table has {', '.join(sorted(busbw_table))}")
    if TABLE_OP.get(op, op) not in busbw_table:
        notes.append(f"{op}: not in the table, timed with all_reduce's busbw")
    bw, _ = busbw_at(points, u["bytes"] / max(u["calls"], 1))
    return wire_target / (bw * 1e9)


def _step_times(profile: dict, comm_new: float, comm_range: dict, compute_scale: float, cpu_shared: float) -> dict:
    """The predicted step from the predicted communication: compute scaled, what communication hides behind
    it, and the interval's ends."""
    comm, exposed = profile[StepKey.COMM_TIME_S], profile["exposed_s"]
    # Communication can hide behind the compute that runs while it is in flight: at least what was hidden
    # in the measured run, at most the backward compute after the first asynchronous call (the overlap
    # window). What does not fit is exposed, and so is, at the least, the measured exposed tail (the last
    # calls, issued when nothing is left to compute) stretched as communication stretches.
    def exposed_given(e: float):
        window = max(comm - e, (profile.get(StepKey.OVERLAP_WINDOW_S) or 0.0) * compute_scale)
        tail = e / comm if comm > 0 else 1.0
        return window, lambda c: max(c - window, c * tail, 0.0)

    window, exposed_at = exposed_given(exposed)
    # the least the run's estimate allows exposed (measured_profile): the interval's low end
    low_e = profile.get("exposed_low_s")
    low_e = exposed if low_e is None else min(low_e, exposed)
    _, exposed_low_at = exposed_given(low_e)

    # the time outside exposed communication: read step by step where the run has it (measured_profile)
    base = profile.get("compute_s")
    base = profile[StepKey.STEP_TIME_S] - exposed if base is None else base
    # each rank's share of the batch scales its forward and backward, not a replicated optimizer step
    optimizer = min(profile.get(StepKey.OPTIMIZER_S) or 0.0, base) if compute_scale != 1 else 0.0

    def compute_alone(e: float) -> float:
        return (base + exposed - e - optimizer) * compute_scale + optimizer
    alone = compute_alone(exposed)
    # lab nodes on one host: more ranks than cores time-share them
    compute = alone * cpu_shared
    exposed_new = exposed_at(comm_new)
    step = compute + exposed_new
    # the compute varies as the measured steps' compute did (not as their step time: on a link-bound run that
    # is mostly the link's steady time)
    q_lo, q_hi = profile.get("compute_spread") or profile.get("step_spread") or (1.0, 1.0)
    # the low end leaves out a slow-down from more ranks on the lab's cores, never the speed-up of fewer: left
    # in, 5 lab ranks projected onto 3 put the low end at 1.67x the compute, and the interval began at its point
    q_lo *= min(cpu_shared, 1.0)
    low = min(alone * q_lo + exposed_at(comm_range["fast"]), compute_alone(low_e) * q_lo + exposed_low_at(comm_range["fast"]))
    high = compute * q_hi + exposed_at(comm_range["slow"])
    return {"step": step, "compute": compute, "window": window, "exposed": exposed_new, "low": low, "high": high}


def _shortfall(time_s: float, wire_s: float, efficiency: float, upward: bool) -> tuple[float, float]:
    """A shaped run's time beyond its wire time (at `efficiency`): (fixed seconds, factor on the target's wire
    time). One run cannot tell a per-call cost (it stays) from a link efficiency below the one assumed (it scales
    with bytes over the rate). Onto a faster link (`upward`), a shortfall an efficiency within EFFICIENCY_RANGE
    explains is read as that: 2 lab nodes x 3 ranks at 5mbit took 0.4365 s for 0.414 s of wire at 0.90 (an
    efficiency of 0.85), and as per-call cost its 22.6 ms went onto 50mbit whole: 0.064 s of communication
    against 0.0444 s measured (0.0437 s read as efficiency). Onto a slower link, or past that range, it is per-call
    cost, as before: there the efficiency reading is amplified instead (50mbit onto 5mbit read +15% against
    +11%; 100mbit's 9.6 ms over 11 ms of wire is latency). The interval's slow end holds the per-call reading.
    An unshaped run (`wire_s` 0): all of it is the transfer at the host's speed, the fixed part."""
    residual = max(time_s - wire_s, 0.0)
    if wire_s <= 0 or not upward or residual > wire_s * (efficiency / EFFICIENCY_RANGE[0] - 1.0):
        return residual, 1.0
    slow = min(residual, wire_s * (efficiency / EFFICIENCY_RANGE[0] - 1.0))
    return residual - slow, 1.0 + slow / wire_s


def _link_bound_note(profile: dict, comm_new: float) -> list[str]:
    """Where the measured step was mostly its link and the target's communication is much shorter, the projected
    step is mostly the measured compute: a small remainder of the measured step, which a single run reads
    loosely. Says how loosely (the steps' own spread of it, which the interval holds)."""
    step, comm, compute = profile[StepKey.STEP_TIME_S], profile[StepKey.COMM_TIME_S], profile.get("compute_s")
    if not (compute and step and comm) or compute > 0.25 * step or comm_new > 0.5 * comm:
        return []
    lo, hi = profile.get("compute_spread") or (1.0, 1.0)
    return [f"the measured step was link-bound ({comm / step:.0%} of it on the link): its compute, {compute:.4f} s, "
            f"is what is left of it and moved {lo * 100 - 100:+.0f}%/{hi * 100 - 100:+.0f}% over its steps (the "
            "interval holds that); a run on a faster link, or repeats, read it more closely"]


def _ranks_on(profile: dict, nodes: int, nodes_measured: int, ranks_per_node: int | None = None) -> int:
    """The world size on `nodes` nodes of `ranks_per_node` ranks (None: as many as measured); refused where the
    kept global batch leaves a rank no sample, or where another count per node is asked of a run measured on
    more than one node (which of its groups crossed which link would have to be re-read)."""
    n = profile["world_size"]
    n_new = max(1, round(n * nodes / nodes_measured))
    if ranks_per_node is not None and ranks_per_node * nodes != n_new:
        if nodes_measured != 1:
            raise ProjectionError(f"--ranks-per-node {ranks_per_node}: the run was measured on {nodes_measured} "
                                  f"nodes of {n // nodes_measured} rank(s); allowed: {n // nodes_measured} (another "
                                  "count per node only from a run measured on one node)")
        n_new = ranks_per_node * nodes
    dp, gbs = profile.get("dp") or n, profile.get("global_batch")
    if gbs and n_new * dp > gbs * n:  # the global batch is kept: a rank with no sample is no layout at all
        raise ProjectionError(f"--nodes {nodes}: {n_new} ranks give dp {n_new * dp // n}, more than the run's global "
                              f"batch of {gbs} samples; allowed: at most {gbs * nodes_measured // dp} node(s) "
                              "(the projection keeps the global batch)")
    return n_new


def _link_bytes(units: list[dict]) -> tuple[list[float], float, list[float], float]:
    """Each unit's bytes on its busiest link, in the measured run and on the target, with the totals over the
    inter-node units (what the token bucket's credit is spread over, on each run's own link). A group measured
    inside one node (`from_intra`) crossed no link then, and crosses the target's."""
    wires = [0.0 if u["from_intra"] else u["bytes"] * bus_factor(u["op"], u["size"]) * u["share_measured"]
             for u in units]
    wires_target = [u["bytes"] * bus_factor(u["op"], u["size_new"]) * u["share_new"] for u in units]

    def on_link(ws: list[float]) -> float:
        return sum(w for u, w in zip(units, ws) if u["scope"] == "inter") or 1.0
    return wires, on_link(wires), wires_target, on_link(wires_target)


def project(profile: dict, link_bps: float | None, latency_s: float = 0.0,
            efficiency: float | None = None, burst_bytes: float = 0.0, nodes: int | None = None,
            busbw_table: dict | None = None, intra_bps: float | None = None,
            ranks_per_node: int | None = None) -> dict:
    """Predicted step time on a fabric of `link_bps` bits/s per link (None: unshaped, as fast as measured),
    or of the busbw in `busbw_table` (load_busbw_table), on `nodes` nodes (None: as measured) of
    `ranks_per_node` ranks each (None: as measured; another count only from a run measured on one node).

    `burst_bytes`: the token bucket of a shaped link (the lab's tbf burst; 0 for real NICs). The link idles
    while the step computes, so up to that many bytes of each step pass without waiting for tokens.
    Returns the step time with `interval_s` (low, high), its communication share and `negligible` (the links add under 5%).

    Runs that recorded process groups (`comm_groups`) put only the inter-node groups' traffic on the target
    link, each with its own group's bus factor; intra-node groups keep their measured time, or take
    `intra_bps` (bits/s) where given. `by_group` says which is which.
    """
    if profile[StepKey.STEP_TIME_S] is None:
        raise ProjectionError("the measured run has no timed steps to project from")
    n = profile["world_size"]
    nodes_measured = profile.get("nodes") or n  # one rank per node when the run does not say
    nodes = nodes or nodes_measured
    n_new = _ranks_on(profile, nodes, nodes_measured, ranks_per_node)
    compute_scale, cpu_shared, notes = _compute_scale(profile, n_new)
    if efficiency is None:
        efficiency = efficiency_for(profile)
    measured_Bps = profile["link_bps"] / 8 * efficiency if profile["link_bps"] else None
    idle = profile[StepKey.STEP_TIME_S] - profile[StepKey.COMM_TIME_S]
    units = _units(profile)
    notes += _grow_groups(units, n, n_new, nodes / nodes_measured, profile.get("links_per_node"), nodes_measured,
                          nodes)
    wires, total, wires_target, total_target = _link_bytes(units)
    credit_measured = _credit(profile.get("burst_bytes") or 0, profile["link_bps"], idle)
    credit_target = _target_credit(busbw_table, burst_bytes, link_bps, idle * compute_scale, notes)
    if busbw_table is not None:
        lo_eff, hi_eff = TABLE_RANGE
    else:
        lo_eff, hi_eff = EFFICIENCY_RANGE[0] / efficiency, EFFICIENCY_RANGE[1] / efficiency
    per_op, by_group, comm_new, wire_new = {}, {}, 0.0, 0.0
    comm_range = {"slow": 0.0, "fast": 0.0}
    for u, wire, wire_target in zip(units, wires, wires_target):
        if u["scope"] != "inter":
            # inside a node (NVLink, loopback): not on the target link. As measured, or at its own rate
            # (`intra_bps`), taken as the measured run's unshaped transfer at least (max, as below)
            fixed = u["time_s"]
            on_wire = wire_target / (intra_bps / 8 * efficiency) if intra_bps else 0.0

            def carried(w: float, fixed=fixed, calls=u["calls"]) -> float:
                return max(fixed, w)
            t_new = carried(on_wire)
            lo_w = hi_w = on_wire
            slow_end = carried(lo_w)
        else:
            # the step's credit, spread over the inter-node collectives by their bytes on each run's links
            share = wire / total
            wire_measured = max(wire - credit_measured * share, 0.0) / measured_Bps if measured_Bps else 0.0
            # onto a faster link only (the shortfall is amplified the other way: see _shortfall)
            upward = bool(measured_Bps and link_bps and busbw_table is None and link_bps > profile["link_bps"])
            fixed, slower = _shortfall(u["time_s"], wire_measured, efficiency, upward)
            as_per_call = max(u["time_s"] - wire_measured, 0.0)  # the other reading, for the interval's slow end
            if busbw_table is not None:
                after_credit = max(wire_target - credit_target * wire_target / total_target, 0.0)
                on_wire = base_wire = _table_wire_s(busbw_table, u, after_credit, notes)
            else:
                target_Bps = link_bps / 8 * efficiency if link_bps else None
                base_wire = (max(wire_target - credit_target * wire_target / total_target, 0.0) / target_Bps
                             if target_Bps else 0.0)
                on_wire = base_wire * slower

            # a shaped run's fixed part is per-call cost: it adds to the new wire time. An unshaped run's (or a group's
            # inside one node) is the transfer at the host's speed, which a slower link overlaps rather than follows
            # (tiny_resnet in the lab: 45 ms unshaped + 119 ms of wire at 1 Gbit/s predicted 164 ms; 127 ms measured)
            def carried(w: float, fixed=fixed, calls=u["calls"], add=bool(measured_Bps) and not u["from_intra"]
                        ) -> float:
                return (fixed + w if add else max(fixed, w)) + latency_s * calls
            t_new = carried(on_wire)
            lo_w, hi_w = base_wire / lo_eff, base_wire / hi_eff
            slow_end = carried(lo_w, fixed=max(fixed, as_per_call) if measured_Bps else fixed)
        _add_unit(per_op, by_group, u, {"bytes": u["bytes"], "wire_bytes": wire_target, "measured_s": u["time_s"],
                                        "fixed_s": fixed, "wire_s": on_wire, "predicted_s": t_new})
        comm_new += t_new
        wire_new += on_wire if u["scope"] == "inter" else 0.0
        comm_range["slow"] += slow_end
        comm_range["fast"] += carried(hi_w)
    t = _step_times(profile, comm_new, comm_range, compute_scale, cpu_shared)
    step, compute, window, exposed_new = t["step"], t["compute"], t["window"], t["exposed"]
    notes += _link_bound_note(profile, comm_new)
    # under NEGLIGIBLE of the step, no faster fabric helps; not where untimed bytes crossed the link (wait in compute)
    untimed_inter = _untimed_inter_note(profile, link_bps, efficiency, busbw_table is not None, notes)
    negligible = wire_new < NEGLIGIBLE * step and not untimed_inter
    return {StepKey.STEP_TIME_S: step, "interval_s": (min(t["low"], step), max(t["high"], step)),
            StepKey.COMM_TIME_S: comm_new,
            "wire_s": wire_new, "fixed_s": comm_new - wire_new, "compute_s": compute, "hidden_s": window,
            "comm_share": exposed_new / step if step else None, "negligible": negligible,
            "link_bps": link_bps, "latency_s": latency_s, "efficiency": efficiency, "by_op": per_op, "by_group": by_group,
            "inter_measured_s": sum(g["measured_s"] for g in by_group.values() if g["on_target_link"]),
            "inter_predicted_s": sum(g["predicted_s"] for g in by_group.values() if g["on_target_link"]),
            "intra_bps": intra_bps, "nodes": nodes, "world_size": n_new, "from": profile["label"],
            "notes": list(dict.fromkeys(notes + startup_notes(profile, link_bps, efficiency, nodes, n_new))),
            "table": busbw_table is not None, "partial": bool(profile.get("partial")),
            "untimed_bytes": profile.get("untimed_bytes")}


def _untimed_inter_note(profile: dict, link_bps, efficiency: float, table: bool, notes: list) -> int:
    """Bytes a step on inter-node groups with no time (gloo's pipeline send/recv), with a note of their wire time
    on the target (lab round 7: a pp run with node 1 at 5mbit, 1 MB a step untimed, read 'communication is
    negligible ... any link above 1.44 kbit/s' while the stage's sends held 1.7 s of its 2 s step)."""
    untimed = sum(g.get("untimed_bytes") or 0 for g in (profile.get("groups") or {}).values() if g["scope"] == "inter")
    if untimed:
        wire = (f", up to {untimed * 8 / (link_bps * efficiency):.4f} s on this link's wire"
                if link_bps and not table else "")
        notes.append(f"{untimed:.0f} bytes a step on inter-node groups had no time (sends and receives each counted"
                     f"{wire}): left out above, their wait is inside the measured {profile[StepKey.STEP_TIME_S]:.4f} s "
                     "step's compute, so whether the fabric matters is not judged")
    return untimed


def negligible_above_bps(profile: dict, fraction: float = NEGLIGIBLE, efficiency: float | None = None,
                         nodes: int | None = None, ranks_per_node: int | None = None) -> float | None:
    """The link rate above which the bytes on the wire take less than `fraction` of the step: the rate past
    which a faster fabric cannot shorten this job's step by more than that."""
    base = project(profile, None, nodes=nodes, ranks_per_node=ranks_per_node)
    n_new = base["world_size"]
    wire = sum(g["wire_bytes"] for g in base["by_group"].values() if g["on_target_link"]) if base["by_group"] else \
        sum(o["bytes"] * bus_factor(op, n_new) for op, o in profile["ops"].items())
    if not wire or not base[StepKey.STEP_TIME_S]:
        return None
    return wire * 8 / (fraction * base[StepKey.STEP_TIME_S]) / (efficiency or efficiency_for(profile))
