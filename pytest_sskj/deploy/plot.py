"""The recommendation plot: throughput vs concurrency per layout, SLO misses and invalid points marked.

matplotlib (Agg) is imported only when a plot is drawn; no pyplot global state.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_sskj.deploy.recommend import Candidate, Recommendation

__all__ = ["plot_recommendation"]


def plot_recommendation(rec: Recommendation, steps: Sequence[dict[str, Any]], out: Path) -> Path | None:
    """One line per layout (median of repeats, range as error bar); x = SLO miss, hollow = failed/client-bound."""
    if not rec.candidates and not steps:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(f"{rec.id}: {rec.metric} vs concurrency per layout")
    ax.set_xlabel("concurrency")
    ax.set_ylabel(rec.metric)
    ax.grid(True, alpha=0.3)
    layouts = list(dict.fromkeys([b.layout for b in rec.ranked]))
    for i, lay in enumerate(layouts):
        color = f"C{i % 10}"
        _draw_candidates(ax, [c for c in rec.candidates if c.layout == lay], lay, color)
        _draw_steps(ax, [s for s in steps if s.get("layout") == lay], lay, color)
    _draw_winner(ax, rec)
    ax.scatter([], [], marker="x", color="red", label="SLO miss")
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="grey", label="failed / client-bound")
    ax.set_xscale("log", base=2)
    ax.legend(loc="best", fontsize="small")
    FigureCanvasAgg(fig)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, format="png")
    os.replace(tmp, out)
    return out


def _draw_candidates(ax: Any, candidates: Sequence[Candidate], lay: str, color: str) -> None:
    """One layout's measured points: the median line with the repeats' range, x on SLO misses, hollow if invalid."""
    mine = sorted((c for c in candidates if c.throughput is not None), key=lambda c: c.concurrency)
    xs = [c.concurrency for c in mine]
    ys = [c.throughput or 0.0 for c in mine]
    if xs:
        lo = [y - min(c.throughputs) for y, c in zip(ys, mine, strict=True)]
        hi = [max(c.throughputs) - y for y, c in zip(ys, mine, strict=True)]
        ax.errorbar(xs, ys, yerr=[lo, hi], color=color, marker="o", capsize=3, label=f"{lay} (repeats)")
    for c in mine:
        if c.slo_ok is False:
            ax.scatter([c.concurrency], [c.throughput or 0.0], marker="x", s=90, color="red", zorder=3)
        elif not c.eligible:
            ax.scatter([c.concurrency], [c.throughput or 0.0], marker="o", s=90, facecolors="none", edgecolors="grey")


def _draw_steps(ax: Any, steps: Sequence[dict[str, Any]], lay: str, color: str) -> None:
    """One layout's search steps as a dotted line, x on the steps that missed the SLO."""
    st = [s for s in steps if isinstance(s.get("throughput"), (int, float))]
    if not st:
        return
    ax.plot(
        [s["concurrency"] for s in st],
        [s["throughput"] for s in st],
        linestyle=":",
        marker=".",
        color=color,
        label=f"{lay} (search steps)",
    )
    miss = [s for s in st if not s.get("slo_ok")]
    ax.scatter([s["concurrency"] for s in miss], [s["throughput"] for s in miss], marker="x", color="red")


def _draw_winner(ax: Any, rec: Recommendation) -> None:
    w = rec.winner
    if w is not None and w.throughput is not None:
        ax.scatter([w.concurrency], [w.throughput], marker="*", s=260, color="gold", edgecolors="black", zorder=4)
        ax.annotate(f"{rec.outcome}: {w.layout} C={w.concurrency}", (w.concurrency, w.throughput))
