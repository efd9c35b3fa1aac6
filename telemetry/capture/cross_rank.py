"""Every rank's per-step values reduced to rank 0 over telemetry's gloo side group: a binomial tree of
fixed-size messages (min, max with its rank, sum and count of each value; on median steps every rank's
vector too).

Two ways to run the same tree:

- `tree_reduce`: the whole tree now (the default). Rank 0 waits for its ceil(log2 world) children in turn, each
  for its own children: one call is a barrier of the job, as long as the slowest rank's end of step plus
  log2(world) message latencies; a killed job keeps every completed step's line.
- `PipelinedTree` (`telemetry.cross_rank_pipelined`, with a record to fill later): a level of the tree per step, never waiting on a message sent in the same step. A rank
  at height h (leaves 0; a rank r > 0 with lowest set bit 2^h; rank 0 ceil(log2 world)) completes at each
  step's end the values of h steps ago: its children (heights below h) sent their part of those in earlier
  steps, so the data is there when it looks, and it sends the combined part to its parent, which completes
  it a step or more later. Rank 0's figures for step s are in at step s + ceil(log2 world) (one step at
  world 2, ten at 1,024), and the per-step barrier of the whole tree is gone: a rank's end of step posts two
  to log2(world) + 1 small messages and waits for none that a late peer still has to send. `drain` (every
  rank, at the end of a run) completes what is still in flight.

Messages of the pipelined tree carry their own tag, so a `tree_reduce` or the link probe on the same group
never takes one of them.
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from typing import Any

import torch

from telemetry.capture.collectives import RECORDED_OPS as OPS
from telemetry.capture.group_timeout import wait_naming
from telemetry.rundir import StepKey

SIDE_GROUP = "telemetry_cross_rank"
EXCHANGE = f"telemetry's cross-rank exchange (process group {SIDE_GROUP})"
PIPELINE_TAG = 61  # the pipelined tree's messages (tree_reduce: 0; link probe: 71, 72)

# The per-rank vector reduced to rank 0 each step; NaN stands for "unknown".
REDUCED = (StepKey.STEP_TIME_S, StepKey.COMM_TIME_S, StepKey.COMM_BYTES, *(f"time_{op}" for op in OPS),
           StepKey.GPU_ENERGY_J, StepKey.GPU_POWER_W, "host_cpu_energy_j", "host_net_tx_bytes", "host_net_rx_bytes",
           "host_rdma_tx_bytes", "host_rdma_rx_bytes", "host_loss_events", "host_reorder_events",
           "host_server_energy_j", "host_server_power_w", "compute_s", StepKey.LINK_IN_S)


# rank 0's job-wide sums: record name -> the REDUCED field summed over ranks (host fields come from one
# rank per host, so the sum is over hosts). Every other field of a record is the writing rank's own.
JOB_SUMS = {StepKey.JOB_GPU_ENERGY_J: StepKey.GPU_ENERGY_J, StepKey.JOB_GPU_POWER_W: StepKey.GPU_POWER_W,
            StepKey.JOB_CPU_ENERGY_J: "host_cpu_energy_j", StepKey.JOB_NET_TX_BYTES: "host_net_tx_bytes",
            StepKey.JOB_NET_RX_BYTES: "host_net_rx_bytes", StepKey.JOB_RDMA_TX_BYTES: "host_rdma_tx_bytes",
            StepKey.JOB_RDMA_RX_BYTES: "host_rdma_rx_bytes", StepKey.JOB_LOSS_EVENTS: "host_loss_events",
            StepKey.JOB_REORDER_EVENTS: "host_reorder_events", StepKey.JOB_SERVER_ENERGY_J: "host_server_energy_j",
            StepKey.JOB_SERVER_POWER_W: "host_server_power_w"}


# Rows of the fixed-size message each rank sends up the tree: one column per reduced value.
MAX, MAX_RANK, MIN, SUM, KNOWN = range(5)
ROWS = 5


def reduction_payload(values: list[float], rank: int) -> list[list[float]]:
    """One rank's contribution, ROWS rows of one column per value; an unknown (NaN) value is left out of every
    figure, never taken as 0. Plain lists: a few dozen floats, where torch's per-op dispatch cost more than the
    arithmetic (bench/cross_rank_scale.py `cpu_costs`); one tensor is made only to send them."""
    known = [v == v for v in values]  # NaN is the one float unequal to itself
    r = float(rank)
    return [[v if k else -math.inf for v, k in zip(values, known)],
            [r if k else -1.0 for k in known],
            [v if k else math.inf for v, k in zip(values, known)],
            [v if k else 0.0 for v, k in zip(values, known)],
            [1.0 if k else 0.0 for k in known]]


def combine_payloads(acc: list[list[float]], other: list[list[float]]) -> list[list[float]]:
    """Fold `other`'s first ROWS rows into `acc`'s (in place). The max keeps its rank; a tie goes to the
    higher rank, as the max over (value, rank) pairs does, so the order of folding does not matter."""
    mx, mr, mn, sm, kn = (acc[i] for i in range(ROWS))
    omx, omr, omn, osm, okn = (other[i] for i in range(ROWS))
    for i in range(len(mx)):
        if omx[i] > mx[i] or (omx[i] == mx[i] and omr[i] > mr[i]):
            mx[i], mr[i] = omx[i], omr[i]
        if omn[i] < mn[i]:
            mn[i] = omn[i]
        sm[i] += osm[i]
        kn[i] += okn[i]
    return acc


def _fold(payload: list[list[float]], got: list[list[float]], per_rank: bool) -> None:
    combine_payloads(payload, got)
    if per_rank:  # a child's subtree is the ranks right after this rank's own: rank order is kept
        payload.extend(got[ROWS:])


def tree_reduce(payload: list[list[float]], rank: int, world: int, group, isend, irecv) -> list[list[float]] | None:
    """The whole binomial tree to rank 0 now: ceil(log2(world)) rounds, one message per rank, and rank 0
    receives ceil(log2(world)) of them; torch's gloo reduce and all_gather are rings, world - 1 or more hops
    deep, and a gather fans in world - 1 messages (docs/telemetry.md, at scale). Rows past ROWS are per-rank
    values (median steps): a sender's subtree is the next `distance` ranks. Rank 0 gets the reduced payload,
    the others None. `isend`/`irecv`: the unwrapped ones (telemetry's own traffic is not the job's)."""
    per_rank = len(payload) > ROWS
    distance = 1
    while distance < world:
        if rank & distance:  # the side group holds every rank: group ranks are global ranks
            dst = rank - distance
            wait_naming(isend(torch.tensor(payload, dtype=torch.float64), dst, group=group), EXCHANGE, dst)
            return None
        src = rank + distance
        if src < world:
            rows = ROWS + (min(distance, world - src) if per_rank else 0)
            incoming = torch.empty(rows, len(payload[0]), dtype=torch.float64)
            wait_naming(irecv(incoming, src, group=group), EXCHANGE, src)
            _fold(payload, incoming.tolist(), per_rank)
        distance <<= 1
    return payload


def height(rank: int, world: int) -> int:
    """The rank's level in the tree: the steps its completions lag its own values (docs/telemetry.md)."""
    if rank == 0:
        return max(world - 1, 0).bit_length()  # ceil(log2(world))
    return (rank & -rank).bit_length() - 1


class PipelinedTree:
    """The tree a level per step (module docstring). `post` at each reduced step's end, on every rank for the
    same steps; `drain` on every rank at the end of a run, `abandon` on a rank that stops alone."""

    def __init__(self, rank: int, world: int, group, isend, irecv, columns: int):
        self.rank, self.world, self.group, self.columns = rank, world, group, columns
        self._isend, self._irecv = isend, irecv
        self.height = height(rank, world)
        low = rank & -rank if rank else 1 << self.height
        self.parent = rank - low if rank else None
        # (child rank, its height, its subtree's size): the ranks rank + 2^j for 2^j below this rank's lowest bit
        self.children = [(rank + (1 << j), j, min(1 << j, world - rank - (1 << j)))
                         for j in range(self.height) if rank + (1 << j) < world]
        self._posted = 0  # slots posted so far (a slot: one reduced step)
        self._pending: deque[dict] = deque()  # this rank's slots not yet completed, oldest first
        self._sends: deque[tuple[Any, torch.Tensor]] = deque()  # (work, tensor kept alive until sent)

    def in_flight(self) -> int:
        return len(self._pending)

    def post(self, payload: list[list[float]], per_rank: bool, owner: Any) -> list[tuple[Any, list[list[float]]]]:
        """This rank's values for the next slot (ROWS rows, its own vector after them when `per_rank`); `owner`
        comes back with the slot once complete. Returns rank 0's completed (owner, payload) pairs, oldest
        first; [] on every other rank."""
        self._reap_sends()
        slot = self._posted
        self._posted += 1
        self._pending.append({"slot": slot, "payload": payload, "per_rank": per_rank, "owner": owner, "recv": []})
        self._post_receives(slot)
        return self._complete(slot - self.height)

    def drain(self) -> list[tuple[Any, list[list[float]]]]:
        """Complete every slot still in flight (every rank together: the tree's waits now block on the peers'
        own draining); rank 0's completed pairs, oldest first."""
        done = []
        slot = self._posted
        while self._pending:
            self._post_receives(slot)
            done += self._complete(slot - self.height)
            slot += 1
        self._reap_sends()
        return done

    def abandon(self) -> list[Any]:
        """A rank stopping alone: nothing more is sent or waited for; the owners of the slots never completed."""
        owners = [p["owner"] for p in self._pending]
        self._pending.clear()
        self._sends.clear()
        return owners

    def _post_receives(self, slot: int) -> None:
        """At slot k a child of height j sends its part of slot k - j: the receive is posted as it is sent,
        so gloo moves it while both ranks train."""
        first = self._pending[0]["slot"] if self._pending else slot
        for child, j, subtree in self.children:
            target = slot - j
            if target < first or target >= self._posted:
                continue
            entry = self._pending[target - first]
            rows = ROWS + (subtree if entry["per_rank"] else 0)
            tensor = torch.empty(rows, self.columns, dtype=torch.float64)
            entry["recv"].append((child, self._irecv(tensor, child, group=self.group, tag=PIPELINE_TAG), tensor))

    def _complete(self, slot: int) -> list[tuple[Any, list[list[float]]]]:
        if slot < 0 or not self._pending or self._pending[0]["slot"] != slot:
            return []
        entry = self._pending[0]  # popped once complete: a failed wait leaves it for abandon()
        payload = entry["payload"]
        while entry["recv"]:  # sent a step or more ago: in by now unless a peer is late
            child, work, tensor = entry["recv"][0]
            wait_naming(work, EXCHANGE, child)
            entry["recv"].pop(0)
            _fold(payload, tensor.tolist(), entry["per_rank"])
        self._pending.popleft()
        if self.parent is None:
            return [(entry["owner"], payload)]
        tensor = torch.tensor(payload, dtype=torch.float64)
        self._sends.append((self._isend(tensor, self.parent, group=self.group, tag=PIPELINE_TAG), tensor))
        return []

    def _reap_sends(self) -> None:
        """The sends of earlier slots: the parent posted their receives then, so these waits return at once
        (gloo completes a send's work only in wait())."""
        while self._sends:
            work, _ = self._sends.popleft()
            wait_naming(work, EXCHANGE, self.parent)


# job sums that every rank contributes to (one GPU each): a sum over fewer ranks is not the job's
EVERY_RANK_SUMS = (StepKey.JOB_GPU_ENERGY_J, StepKey.JOB_GPU_POWER_W)


def cross_rank_figures(rows: list[list[float]], gathered: list[list[float]] | None, world: int | None = None,
                       hosts: int | None = None) -> dict:
    """Rank 0's record fields from the reduced payload (and, on median steps, every rank's values). `world`: the
    ranks reduced; a job-wide GPU sum that fewer of them knew is null, with `job_gpu_energy_reason`. `hosts`: the
    job's hosts (each host's first rank reads the host-wide sources); a host sum fewer of them knew is null,
    named in `job_host_reason`."""

    def spread(i: int) -> dict | None:
        count = int(round(rows[KNOWN][i]))
        if not count:
            return None
        median = None
        if gathered is not None:
            known = [row[i] for row in gathered if not math.isnan(row[i])]
            median = statistics.median(known) if known else None
        return {"min": rows[MIN][i], "median": median, "mean": rows[SUM][i] / count, "max": rows[MAX][i],
                "max_rank": int(rows[MAX_RANK][i]), "ranks": count}

    def total_of(name: str) -> float | None:
        i = REDUCED.index(name)
        return rows[SUM][i] if rows[KNOWN][i] else None

    col = REDUCED.index
    by_op = {op: s for op in OPS if (s := spread(col(f"time_{op}"))) is not None}
    sums = {name: total_of(field) for name, field in JOB_SUMS.items()}
    known = int(round(rows[KNOWN][col(StepKey.GPU_ENERGY_J)]))
    partial = {}
    if world is not None and 0 < known < world:  # not the job's GPUs, only some: unknown, never their sum
        for name in EVERY_RANK_SUMS:
            sums[name] = None
        partial[StepKey.JOB_GPU_ENERGY_REASON] = (f"the GPU energy of {world - known} of {world} ranks is unknown "
                                                  "this step (each rank's gpu_energy_reason says why)")
    lacking = []
    for name, field in JOB_SUMS.items():
        known_hosts = int(round(rows[KNOWN][col(field)]))
        if name not in EVERY_RANK_SUMS and hosts is not None and 0 < known_hosts < hosts:
            sums[name] = None  # some hosts' counters or meters only: not the job's
            lacking.append(f"{name} ({hosts - known_hosts} of {hosts} hosts unknown)")
    if lacking:
        partial[StepKey.JOB_HOST_REASON] = ("unknown on some hosts this step, so not summed: " + ", ".join(lacking)
                                            + " (run.json telemetry says which sources each host lacks)")
    return {
        StepKey.RANKS: {StepKey.STEP_TIME_S: spread(col(StepKey.STEP_TIME_S)),
                        StepKey.COMM_TIME_S: spread(col(StepKey.COMM_TIME_S)),
                  "comm_time_s_by_op": by_op, "compute_s": spread(col("compute_s")),
                  **({StepKey.LINK_IN_S: s} if (s := spread(col(StepKey.LINK_IN_S))) is not None else {})},
        # sums over the job's GPUs / hosts: the job_ prefix (JOB_SUMS); unprefixed fields are the rank's own
        **sums, **partial,
    }
