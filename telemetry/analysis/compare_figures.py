"""Figures of a fabric comparison: axes whose tick labels are numbers with units, bars per fabric with the
% difference written on them, loss curves that stay visible when they are identical, the sweep's time and
bus bandwidth against size. Every figure is written as PNG and as SVG with its text kept as text.

Tick labels come from the formatters here (plain text such as `4 B`, `1 KB`, `10 us`, `1 GB/s`), never
from matplotlib's default log formatter, whose mathtext (`$\\mathdefault{10^{5}}$`) prints raw wherever
math parsing is off. Math parsing stays on inside `figure_style()`; text that comes from the user (run
names, fabric labels) goes through `plain()`, so a `$` in a label is a dollar sign, not a formula.
"""
from __future__ import annotations

import contextlib
import math
import os

from telemetry.rundir import StepKey

# Identical curves (same seed and data: the fabric must not change the losses) would hide each other:
# each fabric gets its own dash pattern and marker, and the curves are drawn widest first.
LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "x"]
DPI = 120

# sizes: binary steps (nccl-tests sweeps double the size), written KB/MB/GB as nccl-tests users read them
SIZE_UNITS = (("TB", 2 ** 40), ("GB", 2 ** 30), ("MB", 2 ** 20), ("KB", 2 ** 10))
# bandwidth: decimal, as nccl-tests' GB/s (1e9 bytes per second)
RATE_UNITS = (("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3))
BUSBW_AXES = ("log", "linear")


def plain(text) -> str:
    """User text for a figure: a `$` stays a dollar sign (mathtext is on for nothing but our own labels)."""
    return str(text).replace("$", r"\$")


@contextlib.contextmanager
def figure_style():
    """matplotlib settings for the comparison's figures, for this block only (rcParams are process-wide)."""
    import matplotlib
    with matplotlib.rc_context({"text.parse_math": True, "svg.fonttype": "none", "svg.hashsalt": "fabric-harness",
                                "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
                                "ytick.labelsize": 8, "legend.fontsize": 8}):
        yield


def _num(v: float) -> str:
    return f"{v:.3g}" if _shown(v) < 1000 else f"{v:.0f}"


def _shown(v: float) -> float:
    """`v` as three significant digits write it, so that the unit is picked for the written value."""
    return float(f"{v:.3g}")


def size_text(n) -> str:
    """4 B, 512 B, 1 KB, 64 MB, 16 GB (1 KB = 1024 B)."""
    if n is None:
        return "n/a"
    for unit, scale in SIZE_UNITS:
        if n >= scale:
            return f"{_num(n / scale)} {unit}"
    return f"{_num(n)} B"


def time_text(us) -> str:
    """A time given in microseconds: 12.3 us, 4.5 ms, 2 s."""
    if us is None:
        return "n/a"
    shown = _shown(us)  # the unit of the value as written: 999.7 us is "1 ms", not "1e+03 us"
    if shown >= 1e6:
        return f"{_num(us / 1e6)} s"
    if shown >= 1e3:
        return f"{_num(us / 1e3)} ms"
    if shown >= 1:
        return f"{_num(us)} us"
    return f"{_num(us * 1e3)} ns"


def rate_text(gbps) -> str:
    """A bandwidth given in GB/s: 542 kB/s, 12.3 MB/s, 24 GB/s (decimal, as nccl-tests)."""
    if gbps is None:
        return "n/a"
    bps = gbps * 1e9
    for unit, scale in RATE_UNITS:
        if _shown(bps) >= scale:
            return f"{_num(bps / scale)} {unit}"
    # nccl-tests prints two decimals of GB/s: 0.00 is under 5 MB/s, not nothing
    return f"{_num(bps)} B/s" if bps else "0.00 GB/s (under 5 MB/s as printed)"


def pct_change(value, base) -> float | None:
    """(value - base) / base; None where either is unknown or the base is 0."""
    if value is None or base in (None, 0):
        return None
    return (value - base) / base


def pct_text(p) -> str:
    """' (+12.3%)', or '' for an unknown change."""
    return "" if p is None else f" ({p * 100:+.1f}%)"


def _log_ticks(lo: float, hi: float, base: float = 10.0) -> list[float]:
    """Ticks at 1, 2, 5 (or 1 only, over wide ranges) times powers of ten from lo to hi: at least two."""
    lo, hi = max(lo, 1e-300), max(hi, 1e-300)
    decades = math.log10(hi / lo) if hi > lo else 0.0
    subs = (1, 2, 5) if decades < 1.6 else (1, 3) if decades < 3 else (1,)
    step = max(1, math.ceil(decades / 8)) if subs == (1,) else 1
    ticks = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2):
        if subs == (1,) and e % step:
            continue
        ticks += [s * base ** e for s in subs if lo * 0.999 <= s * base ** e <= hi * 1.001]
    if len(ticks) < 2:  # a range inside one 1-2-5 step: its ends
        ticks = sorted({lo, hi}) if hi > lo else [lo]
    return ticks


def size_axis(axis, sizes) -> None:
    """A log2 size axis with ticks at powers of two (every 1, 2, 4 or 8), labelled 4 B ... 1 KB ... 16 GB."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator
    sizes = sorted(s for s in sizes if s and s > 0)
    if not sizes:
        return
    lo, hi = sizes[0], sizes[-1]
    axis.axes.set_xscale("log", base=2) if axis is axis.axes.xaxis else axis.axes.set_yscale("log", base=2)
    k_lo, k_hi = math.floor(math.log2(lo) + 1e-9), math.ceil(math.log2(hi) - 1e-9)
    stride = next(s for s in (1, 2, 4, 8, 16) if (k_hi - k_lo) / s <= 10)
    ticks = [2.0 ** k for k in range(k_lo, k_hi + 1) if (k - 2) % stride == 0 and lo <= 2.0 ** k <= hi]
    if len(ticks) < 2:
        ticks = sizes if len(sizes) <= 10 else [lo, hi]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _: size_text(v)))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())
    pad = 2 ** 0.4
    (axis.axes.set_xlim if axis is axis.axes.xaxis else axis.axes.set_ylim)(lo / pad, hi * pad)


def value_axis(axis, values, text, scale: str = "log") -> None:
    """A time or bandwidth axis with tick labels from `text` (time_text, rate_text): log with 1-2-5 ticks
    where the range is narrow, or linear from 0 in the unit its largest value reads best in."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter, NullLocator
    ax = axis.axes
    set_scale = ax.set_xscale if axis is ax.xaxis else ax.set_yscale
    set_lim = ax.set_xlim if axis is ax.xaxis else ax.set_ylim
    known = [v for v in values if v is not None and math.isfinite(v)]
    if scale == "linear":
        set_scale("linear")
        top = max(known, default=0.0) or 1.0
        set_lim(0, top * 1.12)
        axis.set_major_locator(MaxNLocator(6))
        axis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else text(v)))
        return
    positive = [v for v in known if v > 0]
    set_scale("log")
    if not positive:
        return
    lo, hi = min(positive), max(positive)
    pad = 1.25 if hi / lo < 10 else 1.6
    lo_lim, hi_lim = lo / pad, hi * pad
    set_lim(lo_lim, hi_lim)
    axis.set_major_locator(FixedLocator(_log_ticks(lo_lim, hi_lim)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: text(v)))
    axis.set_minor_locator(NullLocator())
    axis.set_minor_formatter(NullFormatter())


def save(plt, fig, out: str, name: str) -> str:
    """NAME (a .png) and its .svg twin, text kept as text in the SVG. Returns NAME."""
    fig.savefig(os.path.join(out, name), dpi=DPI)
    # no <dc:date>: the same runs must give the same files (it made compare.html differ on every render)
    fig.savefig(os.path.join(out, os.path.splitext(name)[0] + ".svg"), metadata={"Date": None})
    plt.close(fig)
    return name


def bars(plt, out: str, name: str, labels: list[str], stats: list[dict | None], ylabel: str,
         title: str, text=None) -> str:
    """One bar per fabric at its mean, error bars one standard deviation where there are repeats, the
    value and its % difference from the first fabric written above each bar. `text` writes a value with
    its unit (tick labels and the numbers on the bars). Returns the file name."""
    from matplotlib.ticker import FuncFormatter
    text = text or (lambda v: f"{v:.3g}")
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = list(range(len(labels)))
    means = [s["mean"] if s else 0.0 for s in stats]
    errs = [(s["sd"] or 0.0) if s else 0.0 for s in stats]
    colors = [f"C{i}" for i in x]
    ax.bar(x, means, yerr=errs if any(errs) else None, capsize=6, color=colors, alpha=0.85)
    base = stats[0]["mean"] if stats[0] else None
    top = max((m + e for m, e in zip(means, errs)), default=0.0) or 1.0
    for i, s in enumerate(stats):
        if s is None:
            ax.text(i, top * 0.02, "not measured", ha="center", va="bottom", fontsize=8, rotation=90)
            continue
        note = text(s["mean"])
        if i and base:
            note += f"\n{(s['mean'] - base) / base * 100:+.1f}%"
        if s["n"] > 1:
            note += f"\nn={s['n']}"
        ax.text(i, s["mean"] + errs[i] + top * 0.02, note, ha="center", va="bottom", fontsize=8)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "0" if v == 0 else text(v)))
    ax.set_xticks(x, [plain(lab) for lab in labels], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.3)
    ax.set_title(plain(title), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save(plt, fig, out, name)


def loss_curves(plt, out: str, labels: list[str], curves: list[list[tuple[int, float]]], title: str,
                name: str = "loss.png") -> str:
    """Loss against step per fabric, each with its own line style and marker, widest first."""
    from matplotlib.ticker import MaxNLocator
    fig, ax = plt.subplots(figsize=(7, 3.6))
    n = len(curves)
    for i, (lab, pts) in enumerate(zip(labels, curves)):
        if not pts:
            continue
        steps, losses = zip(*pts)
        every = max(1, len(steps) // 12)
        ax.plot(steps, losses, linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                markevery=(i % every, every), markersize=5 + 2 * (n - 1 - i), fillstyle="none",
                linewidth=1.0 + 1.2 * (n - 1 - i), label=plain(lab), color=f"C{i}", zorder=2 + i)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    ax.set_title(plain(title), fontsize=9)
    fig.tight_layout()
    return save(plt, fig, out, name)


def sweep_figure(plt, out: str, op: str, labels: list[str], sweeps: list[dict], best_block,
                 busbw_axis: str = "log", line_rates_gbps: list[float | None] | None = None) -> str:
    """One collective: time (log) and bus bandwidth (log or linear) against size (log2), one line per
    fabric, error bars of one standard deviation where a fabric's sweep is a mean of repeats, and each
    fabric's line rate as a dotted line of its color where it is known."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.0))
    sizes, times, bws = [], [], []
    for i, (lab, s) in enumerate(zip(labels, sweeps)):
        pts = [(r["size"], b) for r in s["ops"][op]["rows"] if (b := best_block(r)) and r["size"] > 0]
        merged = bool(s.get("merged_sweeps"))
        t_pts = [(x, b["time_us"], b.get("time_us_sd") or 0.0) for x, b in pts if b.get("time_us")]
        # log axes cannot draw 0: nccl-tests prints busbw 0.00 for small sizes on fast fabrics
        w_pts = [(x, b["busbw_GBps"], b.get("busbw_GBps_sd") or 0.0) for x, b in pts
                 if b.get("busbw_GBps") is not None and (busbw_axis == "linear" or b["busbw_GBps"] > 0)]
        style = dict(fmt=f"{MARKERS[i % len(MARKERS)]}{LINE_STYLES[i % len(LINE_STYLES)]}", label=plain(lab),
                     ms=3.5, capsize=2, color=f"C{i}", linewidth=1.3)
        if t_pts:
            a1.errorbar([p[0] for p in t_pts], [p[1] for p in t_pts],
                        yerr=[p[2] for p in t_pts] if merged else None, **style)
        if w_pts:
            a2.errorbar([p[0] for p in w_pts], [p[1] for p in w_pts],
                        yerr=[p[2] for p in w_pts] if merged else None, **style)
        sizes += [p[0] for p in pts]
        times += [p[1] for p in t_pts]
        bws += [p[1] for p in w_pts]
        rate = (line_rates_gbps or [None] * len(labels))[i]
        if rate:
            a2.axhline(rate, color=f"C{i}", linestyle=":", linewidth=1.0, label=plain(f"{lab} line rate"))
            bws.append(rate)
    for ax in (a1, a2):
        size_axis(ax.xaxis, sizes)
        ax.set_xlabel("message size (1 KB = 1024 B)")
        ax.grid(alpha=0.3, which="major")
    value_axis(a1.yaxis, times, time_text, "log")
    value_axis(a2.yaxis, bws, rate_text, busbw_axis)
    a1.set_ylabel("time per call (log)")
    a2.set_ylabel(f"bus bandwidth ({busbw_axis})")
    a1.set_title("time", fontsize=9), a2.set_title("bus bandwidth", fontsize=9)
    a1.legend(fontsize=8)
    if line_rates_gbps and any(line_rates_gbps):
        a2.legend(fontsize=7)
    fig.suptitle(plain(op))
    for ax in (a1, a2):
        ax.tick_params(axis="x", labelrotation=35)
    fig.tight_layout()
    return save(plt, fig, out, f"sweep_{op}.png")


def _seconds_axis(axis, values) -> None:
    """A linear seconds axis from 0, ticks in the unit the largest value reads best in (us, ms, s)."""
    value_axis(axis, [v * 1e6 for v in values if v is not None], time_text, "linear")


def step_times(plt, out: str, labels: list[str], groups: list[list[list[dict]]], name: str = "step_time.png") -> str:
    """Iteration time per step, one color per fabric; repeats thinner, so their spread shows."""
    from matplotlib.ticker import MaxNLocator
    fig, ax = plt.subplots(figsize=(7, 3.6))
    values = []
    for i, (lab, runs) in enumerate(zip(labels, groups)):
        for k, metrics in enumerate(runs):
            pts = [(r[StepKey.STEP], r[StepKey.STEP_TIME_S] * 1e6) for r in metrics
                   if r.get(StepKey.STEP_TIME_S) is not None]
            if not pts:
                continue
            ax.plot(*zip(*pts), color=f"C{i}", label=plain(lab) if k == 0 else None,
                    linestyle=LINE_STYLES[i % len(LINE_STYLES)], linewidth=1.5 if k == 0 else 0.8,
                    alpha=1.0 if k == 0 else 0.6)
            values += [p[1] for p in pts]
    value_axis(ax.yaxis, values, time_text, "linear")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step"), ax.set_ylabel("iteration time"), ax.grid(alpha=0.3)
    if values:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save(plt, fig, out, name)


def comm_stack(plt, out: str, labels: list[str], ops: list[str], sums: list[dict], repeats: bool,
               name: str = "comm.png") -> str:
    """Per fabric, the median communication time per step stacked by collective, and the iteration time."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    x = list(range(len(labels)))
    bottom = [0.0] * len(labels)
    for op in ops:
        vals = [((s["comm"].get(op) or {}).get("time_per_step_s") or 0.0) * 1e6 for s in sums]
        ax.bar(x, vals, bottom=bottom, label=plain(op), width=0.5)
        bottom = [a + v for a, v in zip(bottom, vals)]
    iters = [(s["step_time_median_s"] or 0.0) * 1e6 for s in sums]
    sds = [((s["spread"].get("step_time_median_s") or {}).get("sd") or 0.0) * 1e6 for s in sums]
    ax.errorbar(x, iters, yerr=sds if repeats else None, fmt="k_", ms=40, mew=2, capsize=4,
                label="iteration time (median)")
    value_axis(ax.yaxis, [a + e for a, e in zip(iters, sds)] + bottom, time_text, "linear")
    ax.set_xticks(x, [plain(lab) for lab in labels], fontsize=8)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylabel("time per step")
    ax.legend(fontsize=8, markerscale=0.25)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save(plt, fig, out, name)


def projection(plt, out: str, proj: list[dict], name: str = "projection.png") -> str:
    """Predicted iteration time with its interval next to the measured one; a measured value outside the
    interval is drawn red and labelled OUTSIDE."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    xs = list(range(len(proj)))
    ax.bar([i - 0.2 for i in xs], [p["predicted_s"] * 1e6 for p in proj], width=0.4, color="C0",
           label="predicted (bars: interval)", capsize=4,
           yerr=[[(p["predicted_s"] - p["interval_s"][0]) * 1e6 for p in proj],
                 [(p["interval_s"][1] - p["predicted_s"]) * 1e6 for p in proj]])
    ax.bar([i + 0.2 for i in xs], [p["measured_s"] * 1e6 for p in proj], width=0.4, label="measured",
           color=["C1" if p["inside"] else "#c00000" for p in proj])
    top = max(max(p["interval_s"][1], p["measured_s"]) for p in proj) * 1e6
    for i, p in enumerate(proj):
        text = f"{p['error'] * 100:+.1f}%" + ("" if p["inside"] else "\nOUTSIDE")
        ax.text(i + 0.2, p["measured_s"] * 1e6 + top * 0.02, text, ha="center", va="bottom", fontsize=8,
                color="black" if p["inside"] else "#c00000", fontweight="normal" if p["inside"] else "bold")
    value_axis(ax.yaxis, [top * 1.15], time_text, "linear")
    ax.set_xticks(xs, [plain(p["label"]) for p in proj], fontsize=8)
    ax.set_ylabel("iteration time (median)")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save(plt, fig, out, name)
