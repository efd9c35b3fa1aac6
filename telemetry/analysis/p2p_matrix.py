"""The harness's GPU pair matrix beside CUDA's p2pBandwidthLatencyTest: its output read as a reference
system, ours written in its table layout, and the ratios between them.

    python -m telemetry p2p RUN [--reference p2pBandwidthLatencyTest.txt]

What is and is not the same: the sweep's `p2p_matrix` (trainer/sweep/run.py) times an NCCL send/recv
between each pair in both directions at once, with P2P on or off as NCCL_P2P_DISABLE says (one run each);
its bandwidth is bytes per direction / time, so x 2 is the sample's "Bidirectional" figure (both
directions added). The sample's unidirectional matrices and its copy-engine path (cudaMemcpyPeerAsync
between two devices of one process) have no counterpart: the harness runs one process per GPU. Its
diagonal (a device's copy to itself) has none either, and reads "-".
"""
from __future__ import annotations

import json
import os
import re

_TITLE = re.compile(r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth(?: \(P2P (?:Writes|Reads)\))? "
                    r"Matrix \(GB/s\)|^P2P=(Enabled|Disabled) Latency(?: \(P2P (Writes|Reads)\))? Matrix \(us\)")


def parse_reference(text: str) -> dict:
    """{"unidirectional"|"bidirectional": {"enabled"|"disabled": matrix}, "latency_gpu"|"latency_cpu": {...}}."""
    out: dict = {}
    key = None
    block = "GPU"
    rows: list[list[float]] = []

    def close():
        if key and rows:
            out.setdefault(key[0] if key[0] != "latency" else f"latency_{block.lower()}", {})[key[1]] = rows[:]

    for line in text.splitlines():
        m = _TITLE.match(line.strip())
        if m:
            close()
            rows.clear()
            block = "GPU"
            key = ((m.group(1) or "latency").lower(), (m.group(2) or m.group(3)).lower())
            continue
        parts = line.split()
        if key and parts and parts[0] in ("GPU", "CPU"):
            close()
            rows.clear()
            block = parts[0]
            continue
        if key and len(parts) > 1 and parts[0].isdigit():
            try:
                rows.append([float(p) for p in parts[1:]])
            except ValueError:
                continue
        elif key and parts and not parts[0].startswith("D\\D") and not parts[0].isdigit():
            close()
            rows.clear()
            key = None
    close()
    return out


def ours(run_dir: str) -> dict | None:
    """The sweep's p2p_matrix (collectives.json), or None."""
    try:
        with open(os.path.join(run_dir, "collectives.json"), encoding="utf-8") as f:
            return json.load(f).get("p2p_matrix")
    except (OSError, json.JSONDecodeError):
        return None


def layout(title: str, matrix: list[list], corner: str = "D\\D", digits: int = 2) -> str:
    """A matrix as the sample prints it: '   D\\D     0      1' then '     0 135.42   5.48'."""
    n = len(matrix)
    lines = [title, f"   {corner}" + "".join(f"{j:7d}" for j in range(n))]
    for i, row in enumerate(matrix):
        lines.append(f"{i:6d} " + " ".join(f"{v:6.{digits}f}" if v is not None else "     -" for v in row))
    return "\n".join(lines)


def bidirectional(m: dict) -> list[list]:
    """Ours as the sample's bidirectional figure: both directions added (bytes per direction x 2 / time)."""
    return [[v * 2 if v is not None else None for v in row] for row in m["bandwidth_GBps"]]


def render(m: dict) -> str:
    state = "Disabled" if m.get("p2p_disabled") else "Enabled"
    return "\n".join([layout(f"Bidirectional P2P={state} Bandwidth Matrix (GB/s) [NCCL send/recv, "
                             f"{m['size']} B per direction]", bidirectional(m)),
                      layout(f"P2P={state} Latency Matrix (us) [NCCL send/recv, {m['latency_bytes']} B]",
                             m["latency_us"], corner="GPU")])


def ratios(m: dict, ref: dict) -> list[list[str]]:
    """Rows: pair, ours, the reference's, ours / reference; bandwidth (bidirectional) and latency, with
    P2P as our run had it; the mean over the pairs last."""
    state = "disabled" if m.get("p2p_disabled") else "enabled"
    rb = (ref.get("bidirectional") or {}).get(state)
    rl = (ref.get("latency_gpu") or {}).get(state)
    bw, rows, found = bidirectional(m), [], {"bw": [], "lat": []}
    n = len(bw)
    for a in range(n):
        for b in range(a + 1, n):
            cells = [f"{a}-{b}"]
            for kind, mine, theirs in (("bw", bw[a][b], rb[a][b] if rb and a < len(rb) and b < len(rb[a]) else None),
                                       ("lat", m["latency_us"][a][b],
                                        rl[a][b] if rl and a < len(rl) and b < len(rl[a]) else None)):
                r = mine / theirs if mine is not None and theirs else None
                if r is not None:
                    found[kind].append(r)
                cells += [f"{mine:.2f}" if mine is not None else "n/a",
                          f"{theirs:.2f}" if theirs is not None else "n/a (no such pair in the reference)",
                          f"{r:.3g}x" if r is not None else "n/a"]
            rows.append(cells)
    mean = [sum(v) / len(v) if v else None for v in (found["bw"], found["lat"])]
    rows.append(["mean over pairs", "", "", f"{mean[0]:.3g}x" if mean[0] else "n/a", "", "",
                 f"{mean[1]:.3g}x" if mean[1] else "n/a"])
    return rows


HEADER = ["pair", "bidirectional GB/s (ours)", "reference", "ratio", "latency us (ours)", "reference", "ratio"]
