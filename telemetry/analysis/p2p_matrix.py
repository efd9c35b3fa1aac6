"""GPU pair matrices beside CUDA's p2pBandwidthLatencyTest: its output read as a reference system, ours
written in its table layout, and the ratios between them.

    python -m telemetry p2p RUN [--reference p2pBandwidthLatencyTest.txt]

Two measurements of ours are read. `p2p_bandwidth.json` (python -m launch.p2p_bandwidth) is the sample's
own measurement, in one process over every ordered pair: unidirectional and bidirectional bandwidth and
GPU/CPU latency, P2P enabled and disabled, by the copy engine (cudaMemcpyPeerAsync) and by an SM copy
kernel; every matrix the sample prints has its counterpart, compared cell by cell. The sweep's
`p2p_matrix` (collectives.json) times an NCCL send/recv between each pair in both directions at once,
with P2P on or off as NCCL_P2P_DISABLE says (one run each); its bandwidth is bytes per direction / time,
so x 2 is the sample's "Bidirectional" figure (both directions added); it has no unidirectional matrix
and no diagonal (a device's copy to itself), which reads "-".
"""
from __future__ import annotations

import json
import math
import os
import re

_TITLE = re.compile(r"^(Unidirectional|Bidirectional) P2P=(Enabled|Disabled) Bandwidth(?: \(P2P (Writes|Reads)\))? "
                    r"Matrix \(GB/s\)|^P2P=(Enabled|Disabled) Latency(?: \(P2P (Writes|Reads)\))? Matrix \(us\)"
                    r"|^P2P (Connectivity) Matrix")

# Every matrix the sample prints, in its order: (kind, state, title). `enabled_reads` only with --p2p_read.
# Latency carries two tables under one title (GPU and CPU), kept as latency_gpu and latency_cpu.
MATRICES = [("unidirectional", "disabled", "Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)"),
            ("unidirectional", "enabled", "Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)"),
            ("unidirectional", "enabled_reads", "Unidirectional P2P=Enabled Bandwidth (P2P Reads) Matrix (GB/s)"),
            ("bidirectional", "disabled", "Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)"),
            ("bidirectional", "enabled", "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)"),
            ("latency", "disabled", "P2P=Disabled Latency Matrix (us)"),
            ("latency", "enabled", "P2P=Enabled Latency (P2P Writes) Matrix (us)"),
            ("latency", "enabled_reads", "P2P=Enabled Latency (P2P Reads) Matrix (us)")]


def _finite(v: float) -> float | None:
    """A cell's value; None (unknown) for nan and inf, which the sample never prints for a measurement."""
    return v if math.isfinite(v) else None


def parse_reference(text: str) -> dict:
    """Every matrix in the sample's output: {"connectivity": matrix, "unidirectional"|"bidirectional"|
    "latency_gpu"|"latency_cpu": {"disabled"|"enabled"|"enabled_reads": matrix}}. Older samples print
    "P2P=Enabled" titles without "(P2P Writes)"; those read as writes."""
    out: dict = {}
    key = None
    block = "GPU"
    rows: list[list[float]] = []

    def close():
        if key and rows:
            if key[0] == "connectivity":  # 0/1; anything else (a damaged cell) is unknown
                out["connectivity"] = [[int(v) if v is not None and v.is_integer() else None for v in r]
                                       for r in rows]
            else:
                out.setdefault(key[0] if key[0] != "latency" else f"latency_{block.lower()}", {})[key[1]] = rows[:]

    for line in text.splitlines():
        m = _TITLE.match(line.strip())
        if m:
            close()
            rows.clear()
            block = "GPU"
            if m.group(6):
                key = ("connectivity", "")
            else:
                state = (m.group(2) or m.group(4)).lower()
                reads = (m.group(3) or m.group(5)) == "Reads"
                key = ((m.group(1) or "latency").lower(), state + ("_reads" if reads else ""))
            continue
        parts = line.split()
        if key and parts and parts[0] in ("GPU", "CPU"):
            close()
            rows.clear()
            block = parts[0]
            continue
        if key and len(parts) > 1 and parts[0].isdigit():
            try:
                rows.append([_finite(float(p)) for p in parts[1:]])
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


# --- the sample's own measurement (launch.p2p_bandwidth): every matrix, cell for cell -----------------

BANDWIDTH_FILE = "p2p_bandwidth.json"


def measured(run_dir: str) -> dict | None:
    """launch.p2p_bandwidth's result (p2p_bandwidth.json in the directory), or None."""
    try:
        with open(os.path.join(run_dir, BANDWIDTH_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def _cell(v) -> str:
    return f"{v:6.2f} " if v is not None else f"{'n/a':>6} "


def sample_table(matrix: list[list], corner: str = "D\\D") -> list[str]:
    """The sample's table, byte for byte: '   D\\D     0      1 ' then '     0 1516.99  38.24 ' (each
    column index as %6d and each value as %6.02f, a blank after each). None (not measured) is 'n/a'."""
    lines = [f"   {corner}" + "".join(f"{j:6d} " for j in range(len(matrix)))]
    lines += [f"{i:6d} " + "".join(_cell(v) for v in row) for i, row in enumerate(matrix)]
    return lines


def connectivity_table(matrix: list[list[int]]) -> list[str]:
    """The sample's "P2P Connectivity Matrix": 1 where the row's device can access the column's."""
    lines = ["P2P Connectivity Matrix", "     D\\D" + "".join(f"{j:6d}" for j in range(len(matrix)))]
    lines += [f"{i:6d}\t" + "".join(f"{v:6d}" for v in row) for i, row in enumerate(matrix)]
    return lines


def render_matrices(matrices: dict, connectivity: list[list[int]] | None = None) -> str:
    """Every matrix present, titled and laid out as the sample prints it, in its order."""
    lines = connectivity_table(connectivity) if connectivity else []
    for kind, state, title in MATRICES:
        if kind == "latency":
            gpu = (matrices.get("latency_gpu") or {}).get(state)
            cpu = (matrices.get("latency_cpu") or {}).get(state)
            if gpu is None:
                continue
            lines += [title, *sample_table(gpu, "GPU")]
            if cpu is not None:
                lines += ["", *sample_table(cpu, "CPU")]
            continue
        m = (matrices.get(kind) or {}).get(state)
        if m is not None:
            lines += [title, *sample_table(m)]
    return "\n".join(lines)


def _keys(matrices: dict):
    """(family, state, title) of each matrix present: family is the key in `matrices` (latency_gpu...)."""
    for kind, state, title in MATRICES:
        families = ("latency_gpu", "latency_cpu") if kind == "latency" else (kind,)
        for fam in families:
            if (matrices.get(fam) or {}).get(state) is not None:
                yield fam, state, (f"{title} [{fam[-3:].upper()}]" if kind == "latency" else title)


def ratio_matrices(ours: dict, ref: dict) -> list[dict]:
    """For every matrix both have: ours / the reference's, cell by cell (None where either lacks the cell
    or the reference reads 0), with the mean, min and max over the pairs (the diagonal, a device's copy to
    itself, is in the matrix but not in these). For latency a ratio above 1 means ours is slower."""
    out = []
    for fam, state, title in _keys(ours):
        theirs = (ref.get(fam) or {}).get(state)
        if theirs is None:
            continue
        mine = ours[fam][state]
        cells = [[(v / theirs[i][j] if v is not None and i < len(theirs) and j < len(theirs[i]) and theirs[i][j]
                   else None) for j, v in enumerate(row)] for i, row in enumerate(mine)]
        pairs = [r for i, row in enumerate(cells) for j, r in enumerate(row) if i != j and r is not None]
        out.append({"family": fam, "state": state, "title": title, "ratio": cells,
                    "pairs": len(pairs), "mean": sum(pairs) / len(pairs) if pairs else None,
                    "min": min(pairs) if pairs else None, "max": max(pairs) if pairs else None})
    return out


RATIO_HEADER = ["matrix (ours / reference)", "pairs", "mean", "min", "max"]


def ratio_rows(ratios: list[dict]) -> list[list[str]]:
    """One row per matrix: its title, the pairs compared and the mean/min/max ratio over them."""
    def f(v):
        return f"{v:.3g}x" if v is not None else "n/a (no pair in both)"
    return [[r["title"], str(r["pairs"]), f(r["mean"]), f(r["min"]) if r["min"] is not None else "",
             f(r["max"]) if r["max"] is not None else ""] for r in ratios]


def ratio_tables(ratios: list[dict]) -> str:
    """Each matrix's ratios in the sample's layout, titled '<the sample's title> (ours / reference)'."""
    lines = []
    for r in ratios:
        lines += [f"{r['title']} (ours / reference)", *sample_table(r["ratio"])]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header] + rows)
