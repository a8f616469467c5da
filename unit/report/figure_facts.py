"""What a saved matplotlib figure shows, as plain data: tests assert on titles, labels, ticks and the drawn
series instead of pixels.  :func:`capture_figures` records every figure written as PNG."""

from __future__ import annotations

import functools
from typing import Any

import pytest


def capture_figures(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every ``Figure`` written as PNG from now on (the file is still written), in order: through ``savefig``
    or straight through the Agg canvas's ``print_png`` (``report/plots.py``: one draw instead of two)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    saved: list[Any] = []
    real = FigureCanvasAgg.print_png

    @functools.wraps(real)  # savefig passes only the keywords the signature names
    def spy(self: FigureCanvasAgg, *args: Any, **kwargs: Any) -> Any:
        out = real(self, *args, **kwargs)  # savefig's layout pass calls it too, and stops it with an exception
        saved.append(self.figure)
        return out

    monkeypatch.setattr(FigureCanvasAgg, "print_png", spy)
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
