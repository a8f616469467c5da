"""What a saved matplotlib figure shows, as plain data: tests assert on titles, labels, ticks and the drawn
series instead of pixels.  :func:`capture_figures` records every figure that ``savefig`` writes."""

from __future__ import annotations

from typing import Any

import pytest


def capture_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``Figure`` saved from now on (the file is still written), in order."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    real = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> Any:
        saved.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    return saved


def _num(values: Any) -> list[float]:
    return [round(float(v), 6) for v in values]


def axes_facts(ax: Any) -> dict[str, Any]:
    """Title, labels, scales, ticks, legend and every line, scatter and text of one axes."""
    from matplotlib.collections import PathCollection

    legend = ax.get_legend()
    return {
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xscale": ax.get_xscale(),
        "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
        "legend": [t.get_text() for t in legend.get_texts()] if legend else [],
        "lines": [
            {
                "label": ln.get_label(),
                "x": _num(ln.get_xdata()),
                "y": _num(ln.get_ydata()),
                "marker": str(ln.get_marker()),
                "linestyle": ln.get_linestyle(),
                "color": str(ln.get_color()),
            }
            for ln in ax.get_lines()
        ],
        "scatter": [
            {"label": c.get_label(), "points": [_num(p) for p in c.get_offsets()]}
            for c in ax.collections
            if isinstance(c, PathCollection)  # scatter; an error bar's LineCollection is part of its line
        ],
        "texts": [t.get_text() for t in ax.texts],
    }


def figure_facts(fig: Any) -> dict[str, Any]:
    return {"suptitle": fig.get_suptitle(), "axes": [axes_facts(ax) for ax in fig.axes]}
