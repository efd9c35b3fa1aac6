"""Figures of a fabric comparison that need more than one line of matplotlib: bars per fabric with the
% difference written on them, and loss curves that stay visible when they are identical."""
from __future__ import annotations

import os

# Identical curves (same seed and data: the fabric must not change the losses) would hide each other:
# each fabric gets its own dash pattern and marker, and the curves are drawn widest first.
LINE_STYLES = ["-", "--", ":", "-."]
MARKERS = ["o", "s", "^", "D", "v", "x"]


def bars(plt, out: str, name: str, labels: list[str], stats: list[dict | None], ylabel: str,
         title: str) -> str:
    """One bar per fabric at its mean, error bars one standard deviation where there are repeats, the
    value and its % difference from the first fabric written above each bar. Returns the file name."""
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
        text = f"{s['mean']:.3g}"
        if i and base:
            text += f"\n{(s['mean'] - base) / base * 100:+.1f}%"
        if s["n"] > 1:
            text += f"\nn={s['n']}"
        ax.text(i, s["mean"] + errs[i] + top * 0.02, text, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, top * 1.3)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name


def loss_curves(plt, out: str, labels: list[str], curves: list[list[tuple[int, float]]], title: str,
                name: str = "loss.png") -> str:
    """Loss against step per fabric, each with its own line style and marker, widest first."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    n = len(curves)
    for i, (lab, pts) in enumerate(zip(labels, curves)):
        if not pts:
            continue
        steps, losses = zip(*pts)
        every = max(1, len(steps) // 12)
        ax.plot(steps, losses, linestyle=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                markevery=(i % every, every), markersize=5 + 2 * (n - 1 - i), fillstyle="none",
                linewidth=1.0 + 1.2 * (n - 1 - i), label=lab, color=f"C{i}", zorder=2 + i)
    ax.set_xlabel("step"), ax.set_ylabel("loss"), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name
