"""Who is slow: a rank whose compute lags the others', or a host whose link lags the other links.

Two per-step signals, both relative (a whole job on a slow fabric or slow devices is not a straggler),
both reduced to rank 0 with the rest of the cross-rank vector (telemetry/capture/session.py; the probe
itself is telemetry/capture/link_probe.py). This module is pure Python: the session and the offline
report share it.

- `compute_s`: a rank's step time less its time with a collective in flight. A rank that computes slowly reaches
  each collective late: it waits little there, the others wait for it, so its compute time stands out.
- `link_in_s`: a link probe. Every `link_probe_every` steps the first rank of each host (its leader)
  sends `link_probe_bytes` to the next host's leader around a ring and times what it receives from the
  previous one, from a small start message to the end of the data, and keeps the fastest of
  PROBE_ROUNDS back-to-back rounds: on the loaded development machine 12 of 100 single-round probes of a
  healthy 1 Gbit/s link took 3-35 ms (a descheduled process, not the link), while a slow link slows every
  round. A slow egress on host H shows as
  the slow receive of H's successor; every other transfer stays fast. Step timing alone cannot tell
  which host: a ring collective runs at its slowest link, so every rank waits alike (measured in the
  fabric lab, docs/telemetry.md). A receiver that arrives late finds the data already buffered and
  measures less, never more: skew between hosts can hide a slow link for a probe, not invent one.

A step flags a rank when its value is at least RATIO times the mean of the other ranks' values (from
the reduction's max, max_rank, mean and count, so it costs nothing more at any scale); a finding needs
the same rank flagged on most of a window of recent samples (the 2-core development machine shows
single-step stalls of 50% and more on healthy runs: bench/results/stragglers.md).

Compute also needs time. Scheduler noise on an oversubscribed host comes in episodes measured in seconds
(another process's burst), not in steps: a healthy 2-rank lab run under the full test suite had one rank
1.5x slower on 8 of 10 steps of ~0.3 s, one noisy window of ~3 s, and was named a straggler. So the
window is the last COMPUTE_WINDOW steps, or more of them until they span COMPUTE_SPAN_S seconds, and
COMPUTE_SHARE of its steps must flag the same rank: on 0.3 s steps that is 28 of the last 34, on 1 s
steps 8 of 10. A real straggler (a slow device, a throttled clock, an injected delay) is slow on every
step and is named as soon as its window is full.
"""
from __future__ import annotations

import math
from collections import deque

from telemetry.rundir import StepKey

COMPUTE_RATIO = 1.5  # the rank's compute takes at least 50% longer than the others' mean
COMPUTE_WINDOW, COMPUTE_SPAN_S = 10, 10.0  # the window: the last 10 steps, or more until they span 10 s
COMPUTE_SHARE = 0.8  # flagged on 80% of the window's steps (8 of 10 when 10 steps span 10 s)
COMPUTE_NEEDED = round(COMPUTE_SHARE * COMPUTE_WINDOW)  # the fewest flagged steps a finding can have
LINK_RATIO = 4.0  # the transfer takes at least 4x the other transfers' mean
LINK_FLOOR_S = 0.002  # and 2 ms more: sub-millisecond probes on fast links are all scheduler noise
LINK_WINDOW, LINK_NEEDED = 4, 3  # flagged on 3 of the last 4 probes

RULE = (f"compute: a rank's step time outside collectives >= {COMPUTE_RATIO}x the other ranks' mean on "
        f"{COMPUTE_SHARE:.0%} of the last {COMPUTE_WINDOW} or more consecutive steps spanning at least "
        f"{COMPUTE_SPAN_S:g} s; network: one host's link-probe transfer >= "
        f"{LINK_RATIO:g}x the other hosts' mean and {LINK_FLOOR_S * 1e3:g} ms slower on {LINK_NEEDED} of "
        f"{LINK_WINDOW} consecutive probes")


def leaders(hosts: list[str]) -> list[int]:
    """The first rank of each host, in rank order: the ranks that probe their host's link."""
    seen, out = set(), []
    for rank, host in enumerate(hosts):
        if host not in seen:
            seen.add(host)
            out.append(rank)
    return out


def _outlier(spread: dict | None) -> tuple[int, float, float] | None:
    """(max_rank, max, mean of the other ranks) from a cross-rank spread; None with fewer than 2 ranks."""
    if not spread or (spread.get("ranks") or 0) < 2 or spread.get("max") is None:
        return None
    n, top = spread["ranks"], spread["max"]
    others = (spread["mean"] * n - top) / (n - 1)
    if not (math.isfinite(top) and math.isfinite(others)):
        return None
    return spread["max_rank"], top, max(others, 0.0)


class StragglerDetector:
    """Fed rank 0's per-step records (their `ranks` spreads); keeps the findings. `hosts[r]` names rank r's
    host; the link probe's receiver is mapped back to the sender, the host whose egress is slow."""

    def __init__(self, hosts: list[str] | None):
        self.hosts = list(hosts) if hosts else None
        self.ring = leaders(self.hosts) if self.hosts else []
        self._compute: deque = deque()  # (step, flagged rank or None, top, others, step seconds)
        self._compute_span_s = 0.0  # the window's step seconds, kept as steps enter and leave it
        self._link: deque = deque(maxlen=LINK_WINDOW)
        self.findings: list[dict] = []
        self._found: set = set()
        self.steps = 0
        self.probes = 0
        self.compute_judged = False  # the compute window was full at least once: a "none" means something

    def _host(self, rank: int) -> str | None:
        return self.hosts[rank] if self.hosts and 0 <= rank < len(self.hosts) else None

    def feed(self, step: int, record: dict) -> list[dict]:
        """New findings at this step (usually none)."""
        ranks = record.get(StepKey.RANKS) or {}
        new = []
        compute = _outlier(ranks.get("compute_s"))
        if compute is not None:
            self.steps += 1
            rank, top, others = compute
            # the step's time: the slowest rank's, else rank 0's own, else (lines without either) at least the
            # top compute
            step_s = ((ranks.get(StepKey.STEP_TIME_S) or {}).get("max") or record.get(StepKey.STEP_TIME_S)
                      or max(top, 0.0))
            self._compute.append((step, rank if top >= COMPUTE_RATIO * others and top > 0 else None, top, others,
                                  step_s))
            self._compute_span_s += step_s
            while len(self._compute) > COMPUTE_WINDOW and \
                    self._compute_span_s - self._compute[0][4] >= COMPUTE_SPAN_S:
                # older than both the last COMPUTE_WINDOW steps and COMPUTE_SPAN_S
                self._compute_span_s -= self._compute.popleft()[4]
            if self.compute_window_full:
                self.compute_judged = True
                needed = max(COMPUTE_NEEDED, math.ceil(COMPUTE_SHARE * len(self._compute)))
                new += self._persisting("compute", self._compute, needed, rank)
        link = _outlier(ranks.get(StepKey.LINK_IN_S))
        if link is not None:
            self.probes += 1
            receiver, top, others = link
            slow = top >= LINK_RATIO * others and top - others >= LINK_FLOOR_S
            sender = self._sender(receiver)
            self._link.append((step, sender if slow else None, top, others))
            new += self._persisting("network", self._link, LINK_NEEDED, sender)
        return new

    @property
    def compute_window_full(self) -> bool:
        """The compute window holds enough for a verdict: >= COMPUTE_WINDOW steps spanning >= COMPUTE_SPAN_S."""
        return len(self._compute) >= COMPUTE_WINDOW and self._compute_span_s >= COMPUTE_SPAN_S

    def _sender(self, receiver: int) -> int:
        """The leader before `receiver` in the probe ring (the receiver itself when the ring is unknown)."""
        if receiver in self.ring:
            return self.ring[self.ring.index(receiver) - 1]
        return receiver

    def _persisting(self, kind: str, window: deque, needed: int, rank: int) -> list[dict]:
        flagged = [s for s in window if s[1] == rank]
        if len(flagged) < needed or (kind, rank) in self._found:
            return []
        self._found.add((kind, rank))
        steps = [s[0] for s in flagged]
        finding = {"verdict": kind, "rank": rank, "host": self._host(rank), "since_step": steps[0],
                   "detected_at_step": steps[-1], "flagged": f"{len(flagged)} of {len(window)}",
                   "value_s": _mean(s[2] for s in flagged), "others_mean_s": _mean(s[3] for s in flagged),
                   "signal": "time outside collectives" if kind == "compute" else
                   f"link probe, {self._host(rank) or f'rank {rank}'} -> next host"}
        if kind == "network" and self.hosts is None:
            finding["host_reason"] = "host names unknown: the receiving leader's predecessor is assumed"
        self.findings.append(finding)
        return [finding]

    def summary(self) -> dict:
        """run.json's telemetry.stragglers: the first finding up front, all of them listed."""
        out = {"rule": RULE, "steps_checked": self.steps, "probes": self.probes, "findings": self.findings}
        if self.findings:
            first = self.findings[0]
            out.update(verdict=first["verdict"], rank=first["rank"], host=first["host"],
                       detected_at_step=first["detected_at_step"])
        elif self.compute_judged or self.probes >= LINK_NEEDED:
            out.update(verdict="none", rank=None, host=None, detected_at_step=None)
        elif self.steps or self.probes:  # too short a run for the rule: unknown, not "none"
            out.update(verdict=None, rank=None, host=None, detected_at_step=None,
                       reason=f"too few to judge: {self.steps} steps checked (the compute rule needs "
                              f"{COMPUTE_WINDOW} spanning {COMPUTE_SPAN_S:g} s) and {self.probes} link probes "
                              f"(the network rule needs {LINK_NEEDED})")
        else:
            out.update(verdict=None, rank=None, host=None, detected_at_step=None,
                       reason="no cross-rank step times (one rank, or telemetry.cross_rank_every: 0)")
        return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def detect(records: list[dict], hosts: list[str] | None) -> dict:
    """Replay a run's metrics lines (rank 0's records) through the detector: the report's view."""
    det = StragglerDetector(hosts)
    for r in records:
        if isinstance(r.get(StepKey.STEP), int):
            det.feed(r[StepKey.STEP], r)
    return det.summary()


def describe(finding: dict) -> str:
    """One line for the console and the report."""
    who = f"rank {finding['rank']}" + (f" on {finding['host']}" if finding.get("host") else "")
    if finding["verdict"] == "compute":
        what = (f"compute: {finding['value_s']:.3f} s/step outside collectives vs {finding['others_mean_s']:.3f} s "
                f"on the other ranks")
    else:
        what = (f"network: its link's probe took {finding['value_s'] * 1e3:.1f} ms vs {finding['others_mean_s'] * 1e3:.1f} "
                f"ms on the other links")
    samples = "steps" if finding["verdict"] == "compute" else "probes"
    return (f"straggler {who}: {what}; flagged on {finding['flagged']} recent {samples}, since step "
            f"{finding['since_step']} (detected at step {finding['detected_at_step']})")


def report_section(info: dict, metrics: list[dict]) -> tuple[str, list[str], list[list[str]]]:
    """The report's "Stragglers" table: run.json's findings, or the metrics replayed where it has none."""
    found = (info.get("telemetry") or {}).get("stragglers")
    source = "recorded during the run"
    if not found:
        hosts = [h.get("hostname") for h in info.get("hosts") or []] or None
        found = detect(metrics, hosts)
        source = "replayed from metrics.jsonl"
    if found.get("verdict") is None:
        return ("Stragglers", ["", ""], [["verdict", f"not checked: {found.get('reason')}"]])
    rows = [["verdict", found["verdict"]], ["rank", "n/a" if found["rank"] is None else str(found["rank"])],
            ["host", found["host"] or "n/a"],
            ["detected at step", "n/a" if found["detected_at_step"] is None else str(found["detected_at_step"])]]
    rows += [["finding", describe(f)] for f in found["findings"]]
    rows += [["checked", f"{found['steps_checked']} steps, {found['probes']} link probes ({source})"],
             ["rule", found["rule"]]]
    return ("Stragglers", ["", ""], rows)
