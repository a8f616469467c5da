"""One point's telemetry as a figure: the server's token throughput next to the client's, power and SM clock.

Top panel: the engine's generated tokens per second between consecutive ``/metrics`` scrapes, and the
client's ``output_throughput`` as a line; middle: GPU power per node/GPU; bottom: SM clock.  matplotlib is
imported here only (lazily, Agg backend).  Returns ``None`` when there is nothing to draw.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from pytest_sskj.telemetry.prometheus import generation_tokens

__all__ = ["plot_point"]


def _load(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


_GpuSeries = dict[str, list[tuple[float, float | None, float | None]]]


def _server_rate(recs: list[dict[str, Any]], t0: float) -> list[tuple[float, float]]:
    """The engine's generated tok/s between consecutive ``/metrics`` samples, at each interval's midpoint."""
    counted: list[tuple[float, float]] = []
    for r in recs:
        v = generation_tokens(r.get("values") or {}) if r.get("source") == "metrics" else None
        if v is not None:
            counted.append((float(r["t"]) - t0, v))
    return [((a[0] + b[0]) / 2, (b[1] - a[1]) / (b[0] - a[0])) for a, b in itertools.pairwise(counted) if b[0] > a[0]]


def _gpu_series(recs: list[dict[str, Any]], t0: float) -> _GpuSeries:
    """``node/gpuN`` -> its ``(seconds, power_w, sm_clock_mhz)`` samples."""
    gpu: _GpuSeries = {}
    for r in recs:
        for g in r.get("gpus") or [] if r.get("source") == "gpu" else []:
            gpu.setdefault(f"{r.get('node')}/gpu{g.get('index')}", []).append(
                (float(r["t"]) - t0, g.get("power_w"), g.get("sm_clock_mhz"))
            )
    return gpu


def _draw_throughput(ax: Any, rate: list[tuple[float, float]], client_tps: float | None) -> None:
    if rate:
        ax.plot([t for t, _ in rate], [v for _, v in rate], marker=".", label="server /metrics generated tok/s")
    if client_tps is not None:
        ax.axhline(client_tps, color="tab:red", linestyle="--", label=f"client output_throughput {client_tps:.1f}")
    ax.set_ylabel("tok/s")
    ax.legend(loc="best", fontsize=8)


def _draw_gpus(power_ax: Any, clock_ax: Any, gpu: _GpuSeries) -> None:
    for name, series in sorted(gpu.items()):
        power_ax.plot(
            [t for t, p, _ in series if p is not None], [p for _, p, _ in series if p is not None], label=name
        )
        clock_ax.plot(
            [t for t, _, c in series if c is not None], [c for _, _, c in series if c is not None], label=name
        )
    power_ax.set_ylabel("power W")
    clock_ax.set_ylabel("SM clock MHz")
    clock_ax.set_xlabel("seconds into the point")
    if not gpu:
        power_ax.text(0.5, 0.5, "no GPU telemetry on this node", ha="center", transform=power_ax.transAxes)


def plot_point(path: Path, out_png: Path, *, client_tps: float | None = None, title: str = "") -> Path | None:
    """Draw ``telemetry.jsonl`` at ``path`` into ``out_png``."""
    recs = _load(path)
    if not recs:
        return None
    t0 = min(float(r.get("t") or 0.0) for r in recs)
    rate = _server_rate(recs, t0)
    gpu = _gpu_series(recs, t0)
    if not rate and not gpu:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    _draw_throughput(axes[0], rate, client_tps)
    _draw_gpus(axes[1], axes[2], gpu)
    fig.suptitle(title or path.parent.name)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=90)
    plt.close(fig)
    return out_png
