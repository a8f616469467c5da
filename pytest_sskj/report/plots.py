"""PNG plots of a run (matplotlib, Agg, imported lazily): throughput vs chunk, TTFT vs concurrency,
TTFT CDF per backend, and the adaptive concurrency search against its SLO line.

Every function takes plain data (result rows, verdict dicts, per-request samples), writes one PNG
atomically and returns its path, or ``None`` when there is nothing to draw.  No pyplot global state is
used: each plot is a fresh :class:`matplotlib.figure.Figure` rendered by the Agg canvas.

A run's plots are one list of :class:`PlotTask` (:func:`plot_tasks`).  :func:`render_all` draws them here, one
after another; :mod:`pytest_sskj.report.plot_drawing` draws the same tasks in child processes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pytest_sskj.report.summary import format_chunk, summarize_points
from pytest_sskj.rundir import atomic_target
from pytest_sskj.vocabulary import UnknownMetric, stored_value

__all__ = [
    "PlotTask",
    "find_request_files",
    "metric_value",
    "plot_chunk_curve",
    "plot_search",
    "plot_tasks",
    "plot_throughput_vs_chunk",
    "plot_ttft_cdf",
    "plot_ttft_vs_concurrency",
    "render_all",
    "request_files_by_concurrency",
    "search_plot_name",
    "ttft_samples",
]


def _figure(title: str, run_id: str | None = None) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.set_title(f"{title}\nrun {run_id}" if run_id else title)
    ax.grid(True, alpha=0.3)
    return fig, ax


_SAVEFIG_RC = ("savefig.dpi", "savefig.facecolor", "savefig.edgecolor", "savefig.bbox", "savefig.transparent")
"""The settings ``savefig`` applies and ``print_png`` does not: only at their defaults do both write the same file."""


def _save(fig: Any, out: Path) -> Path:
    """Write ``fig`` as PNG: one draw, in which the layout engine runs (``savefig`` draws twice, a layout pass
    without rendering first: 15 % of a plot's time); ``savefig`` itself where a matplotlibrc changes what it
    would write."""
    import matplotlib as mpl
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas: Any = FigureCanvasAgg(fig)
    rc: Any = mpl.rcParams
    defaults: Any = mpl.rcParamsDefault
    with atomic_target(out) as tmp:
        if all(rc[k] == defaults[k] for k in _SAVEFIG_RC):
            canvas.print_png(tmp)
        else:
            fig.savefig(tmp, format="png")
    return out


def plot_throughput_vs_chunk(rows: Sequence[Mapping[str, Any]], out: Path, run_id: str | None = None) -> Path | None:
    """Median input throughput (tok/s) against chunk size, one line per backend and concurrency."""
    pts = [p for p in summarize_points(rows) if p.input_throughput is not None and isinstance(p.chunk, int)]
    if not pts:
        return None
    fig, ax = _figure("Input throughput vs chunked-prefill size, per backend and concurrency", run_id)
    for backend, conc in sorted({(p.backend, p.concurrency) for p in pts}, key=str):
        line = sorted((p.chunk, p.input_throughput) for p in pts if (p.backend, p.concurrency) == (backend, conc))
        ax.plot([c for c, _ in line], [v for _, v in line], marker="o", label=f"{backend} C={conc}")
    chunks = sorted({p.chunk for p in pts})
    ax.set_xscale("log", base=2)
    ax.set_xticks(chunks, [format_chunk(c) for c in chunks])
    ax.set_xlabel("chunk size (tokens)")
    ax.set_ylabel("input throughput (tok/s, median of repeats)")
    ax.legend()
    return _save(fig, out)


def plot_chunk_curve(
    verdict: Mapping[str, Any], out: Path, rows: Sequence[Mapping[str, Any]] = (), run_id: str | None = None
) -> Path | None:
    """One chunk-curve verdict: its ``points`` (``chunk``, ``input_throughput``) with the best chunk marked; without
    points, the rows of its backend and concurrency."""
    pts = [
        (p.get("chunk"), stored_value(p, "input_throughput"))
        for p in verdict.get("points") or []
        if isinstance(p, Mapping)
    ]
    line = sorted((int(c), float(v)) for c, v in pts if isinstance(c, int) and isinstance(v, (int, float)))
    if not line:
        mine = [
            r
            for r in rows
            if r.get("backend") == verdict.get("backend")
            and (verdict.get("concurrency") is None or r.get("concurrency") == verdict.get("concurrency"))
        ]
        return plot_throughput_vs_chunk(mine, out, run_id)
    who = f"{verdict.get('backend', '')} C={verdict.get('concurrency', '?')}"
    title = f"Chunk curve: input throughput per chunk size, {who}"
    fig, ax = _figure(title, run_id)
    ax.plot([c for c, _ in line], [v for _, v in line], marker="o", label=str(verdict.get("backend", "")))
    best = verdict.get("best_chunk")
    for c, v in line:
        if c == best:
            ax.plot(
                [c],
                [v],
                marker="*",
                markersize=16,
                color="tab:green",
                linestyle="none",
                label=f"best chunk {format_chunk(c)}",
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks([c for c, _ in line], [format_chunk(c) for c, _ in line])
    ax.set_xlabel("chunk size (tokens)")
    ax.set_ylabel("input throughput (tok/s, median of repeats)")
    ax.legend()
    return _save(fig, out)


def _ttft_by_concurrency(
    rows: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, Any], list[tuple[int, float, float | None]]]:
    """Per (backend, chunk): (C, median TTFT P50, median TTFT P95) over the passed rows of every kind (the serving
    points' repeats and the concurrency search's steps), so the curve spans every concurrency the run measured."""
    from statistics import median

    groups: dict[tuple[str, Any, int], tuple[list[float], list[float]]] = {}
    for r in rows:
        c, p50, p95 = r.get("concurrency"), r.get("median_ttft_ms"), r.get("p95_ttft_ms")
        if r.get("status") != "passed" or not isinstance(c, int) or not isinstance(p50, (int, float)):
            continue
        g = groups.setdefault((str(r.get("backend")), r.get("chunk"), c), ([], []))
        g[0].append(float(p50))
        if isinstance(p95, (int, float)):
            g[1].append(float(p95))
    out: dict[tuple[str, Any], list[tuple[int, float, float | None]]] = {}
    for (backend, chunk, c), (p50s, p95s) in sorted(groups.items(), key=str):
        out.setdefault((backend, chunk), []).append((c, median(p50s), median(p95s) if p95s else None))
    return {k: sorted(v) for k, v in out.items()}


def plot_ttft_vs_concurrency(rows: Sequence[Mapping[str, Any]], out: Path, run_id: str | None = None) -> Path | None:
    """TTFT P50 (solid) and P95 (dashed) in ms against concurrency, per backend and chunk: the serving points
    and the concurrency search's steps (medians over repeats), on a log2 axis with one tick per measured C."""
    lines = _ttft_by_concurrency(rows)
    if not lines:
        return None
    fig, ax = _figure("TTFT vs concurrency, per backend and chunk (serving points and search steps)", run_id)
    for (backend, chunk), line in lines.items():
        drawn = ax.plot(
            [c for c, _, _ in line],
            [v for _, v, _ in line],
            marker="o",
            label=f"{backend} chunk {format_chunk(chunk)} P50",
        )
        p95 = [(c, v) for c, _, v in line if v is not None]
        if p95:
            ax.plot(
                [c for c, _ in p95],
                [v for _, v in p95],
                marker="x",
                linestyle="--",
                color=drawn[0].get_color(),
                label=f"{backend} chunk {format_chunk(chunk)} P95",
            )
    concs = sorted({c for line in lines.values() for c, _, _ in line})
    if len(concs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (in-flight requests)")
    ax.set_ylabel("TTFT (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small")
    return _save(fig, out)


def _ttft_ms(rec: Mapping[str, Any]) -> float | None:
    if (
        rec.get("warmup")
        or rec.get("error")
        or rec.get("failure")
        or rec.get("ok") is False
        or rec.get("success") is False
    ):
        return None
    t_send, t_first = rec.get("t_send"), rec.get("t_first")
    if isinstance(t_send, (int, float)) and isinstance(t_first, (int, float)):
        return (float(t_first) - float(t_send)) * 1000.0  # raw perf_counter stamps of the bench client
    for key, scale in (("ttft_ms", 1.0), ("ttft_s", 1000.0), ("ttft", 1000.0)):
        v = rec.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v) * scale
    return None


def ttft_samples(paths: Iterable[Path]) -> list[float]:
    """TTFT in ms of every measured, successful request in ``requests.jsonl`` files (the bench client's
    ``t_first - t_send``, else ``ttft_ms``, ``ttft_s`` or sglang's ``ttft`` in seconds); warmup requests and
    damaged lines are skipped."""
    out: list[float] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            v = _ttft_ms(rec) if isinstance(rec, dict) else None
            if v is not None:
                out.append(v)
    return out


def find_request_files(run_dir: Path, rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Path]]:
    """The per-request files of ``rows`` by each row's own ``backend``: its ``request_file`` (relative to
    ``run_dir``), else (rows written before schema ``sskj-row/2``) the run store's file of its ``point_id``;
    rows whose file is missing are left out.  Nothing is inferred from path names."""
    from pytest_sskj.rundir import RunLayout

    layout = RunLayout(run_dir)
    found: dict[str, list[Path]] = {}
    for r in rows:
        rel = r.get("request_file")
        path = run_dir / str(rel) if rel else layout.request_file(str(r.get("point_id"))) if r.get("point_id") else None
        if path is not None and path.is_file() and r.get("backend") is not None:
            found.setdefault(str(r["backend"]), []).append(path)
    return found


def plot_ttft_cdf(
    samples: Mapping[str, Sequence[float]] | Mapping[tuple[int, str], Sequence[float]],
    out: Path,
    run_id: str | None = None,
) -> Path | None:
    """Empirical CDF of per-request TTFT (ms): one panel per concurrency (keys ``(C, label)``), one curve per
    label in it; plain string keys are one panel (requests of different concurrencies are never pooled by
    :func:`render_all`)."""
    panels: dict[int | None, dict[str, list[float]]] = {}
    for key, v in samples.items():
        if not v:
            continue
        conc, label = key if isinstance(key, tuple) else (None, str(key))
        panels.setdefault(conc, {})[label] = sorted(v)
    if not panels:
        return None
    from matplotlib.figure import Figure

    order = sorted(panels, key=lambda c: -1 if c is None else c)
    fig = Figure(figsize=(8, max(5.0, 3.2 * len(order) + 0.6)), dpi=100, layout="constrained")
    axes = fig.subplots(len(order), 1, squeeze=False)[:, 0]
    title = "TTFT distribution (empirical CDF), one panel per concurrency"
    fig.suptitle(f"{title}\nrun {run_id}" if run_id else title)
    labels = sorted({label for curves in panels.values() for label in curves})
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}  # one colour per curve in every panel
    for ax, conc in zip(axes, order, strict=True):
        for label, xs in sorted(panels[conc].items()):
            n = len(xs)
            ax.step(xs, [(i + 1) / n for i in range(n)], where="post", label=f"{label} (n={n})", color=colors[label])
        ax.set_title(f"C={conc}" if conc is not None else "all requests")
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("TTFT (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize="small")
    return _save(fig, out)


def request_files_by_concurrency(run_dir: Path, rows: Iterable[Mapping[str, Any]]) -> dict[tuple[int, str], list[Path]]:
    """Like :func:`find_request_files`, keyed by (concurrency, ``backend chunk N``): the CDF's panels and curves."""
    out: dict[tuple[int, str], list[Path]] = {}
    for r in rows:
        c = r.get("concurrency")
        if not isinstance(c, int):
            continue
        for backend, paths in find_request_files(run_dir, [r]).items():
            out.setdefault((c, f"{backend} chunk {format_chunk(r.get('chunk'))}"), []).extend(paths)
    return out


def _gate(text: str) -> tuple[str, float] | None:
    """``(canonical metric, threshold)`` of the first gate of ``text``, parsed by :func:`pytest_sskj.slo.parse_slo`
    (the one SLO grammar); ``None`` when ``text`` is not a valid SLO (a stored verdict from an older run)."""
    from pytest_sskj.slo import parse_slo

    try:
        gates = parse_slo(text)
    except ValueError:
        return None
    return (gates[0].metric, gates[0].threshold) if gates else None


def metric_value(metrics: Mapping[str, Any], name: str) -> float | None:
    """``metrics[name]`` read through the registry: under the canonical name or any alias of it
    (``ttft_p95_ms`` <-> sglang's ``p95_ttft_ms``); ``None`` for a name the registry does not know."""
    try:
        return stored_value(metrics, name)
    except UnknownMetric:
        return None


def plot_search(
    verdict: Mapping[str, Any], out: Path, slo: Sequence[str] = (), run_id: str | None = None
) -> Path | None:
    """The adaptive search: the measured metric per concurrency step against the SLO threshold.

    The metric and threshold are the verdict's ``metric``/``threshold``, else the first gate of its
    ``slo`` (or of ``slo``, e.g. ``["ttft_p95_ms<3000"]``); a step's value is its ``value``, else its
    ``metrics[metric]``; a step passed when ``passed`` (or the acceptance layer's ``slo_ok``) is true."""
    metric, thr = _search_target(verdict, slo)
    pts = _search_points(verdict, metric)
    if not pts:
        return None
    title = f"Concurrency search: {metric} per step vs the SLO, {verdict.get('backend', '')} chunk " + format_chunk(
        verdict.get("chunk")
    )
    fig, ax = _figure(title.strip(), run_id)
    ax.plot([c for c, _, _ in pts], [v for _, v, _ in pts], color="tab:blue", label=metric)
    _step_marks(ax, pts)
    _slo_mark(ax, metric, thr, max(v for _, v, _ in pts))
    best = verdict.get("best_concurrency", verdict.get("best"))
    if isinstance(best, (int, float)):
        ax.axvline(float(best), color="tab:green", linestyle=":", label=f"best C = {best:g}")
    concs = sorted({int(c) for c, _, _ in pts})
    if len(concs) > 1:
        ax.set_xscale("log", base=2)
    ax.set_xticks(concs, [str(c) for c in concs])
    ax.minorticks_off()
    ax.set_xlabel("concurrency")
    ax.set_ylabel(metric)
    ax.legend()
    return _save(fig, out)


def _search_target(verdict: Mapping[str, Any], slo: Sequence[str]) -> tuple[str, Any]:
    """The searched metric and its threshold: the verdict's own, else the first parseable SLO gate."""
    gates = [g for g in (_gate(str(t)) for t in [*(verdict.get("slo") or []), *slo]) if g]
    metric = str(verdict.get("metric") or (gates[0][0] if gates else "p95_ttft_ms"))
    return metric, verdict.get("threshold", gates[0][1] if gates else None)


def _search_points(verdict: Mapping[str, Any], metric: str) -> list[tuple[float, float, bool]]:
    """``(concurrency, value, passed)`` of every step that has both numbers."""
    pts = []
    for s in verdict.get("steps") or []:
        if not isinstance(s, Mapping):
            continue
        v = s.get("value")
        if not isinstance(v, (int, float)):
            v = metric_value({**s, **(s.get("metrics") or {})}, metric)
        if isinstance(s.get("concurrency"), (int, float)) and isinstance(v, (int, float)):
            pts.append((float(s["concurrency"]), float(v), bool(s.get("passed", s.get("slo_ok", True)))))
    return pts


def _step_marks(ax: Any, pts: Sequence[tuple[float, float, bool]]) -> None:
    """A green dot per passed step, a red x per failed one; each kind named once in the legend."""
    shown: set[bool] = set()
    for c, v, ok in pts:
        label = None if ok in shown else "step passed" if ok else "step failed (SLO miss, or not a valid measurement)"
        shown.add(ok)
        ax.plot(
            [c], [v], marker="o" if ok else "x", color="tab:green" if ok else "tab:red", linestyle="none", label=label
        )


def _slo_mark(ax: Any, metric: str, thr: Any, top: float) -> None:
    """The SLO threshold as a line when it lies near the data; far above it (a CPU-scale 30 s SLO over 50 ms
    data), the axis stays scaled to the data and the threshold is written at the top edge instead."""
    ax.set_ylim(bottom=0)
    if not isinstance(thr, (int, float)):
        return
    if float(thr) <= 1.5 * top:
        ax.axhline(float(thr), color="tab:red", linestyle="--", label=f"SLO {metric} < {thr:g}")
        return
    ax.set_ylim(0, top * 1.25)
    ax.annotate(
        f"SLO {metric} < {thr:g}: {float(thr) / top:.0f}x above the highest step (off the axis) \u2191",
        xy=(0.5, 0.97),
        xycoords="axes fraction",
        ha="center",
        va="top",
        color="tab:red",
    )


def search_plot_name(index: int, verdict: Mapping[str, Any]) -> str:
    """``search_0_marlin_8192.png``: file-name-safe, unique per search verdict of a run."""
    raw = f"search_{index}_{verdict.get('backend', 'x')}_{verdict.get('chunk', 'x')}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw) + ".png"


def chunk_curve_plot_name(verdict: Mapping[str, Any]) -> str:
    """``chunk_curve_marlin_c16.png``: one per chunk-curve verdict (backend, concurrency)."""
    raw = f"chunk_curve_{verdict.get('backend')}_c{verdict.get('concurrency')}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw) + ".png"


@dataclass(frozen=True)
class PlotTask:
    """One plot of a run: its file name under ``plots/``, its relative cost (the axes it draws: what
    :func:`draw_plots` balances the shares by) and the call that draws it (returns ``None``: nothing to draw)."""

    name: str
    weight: int
    draw: Callable[[], Path | None]


def _draw_ttft_cdf(run_dir: Path, rows: Sequence[Mapping[str, Any]], out: Path, run_id: str) -> Path | None:
    files = request_files_by_concurrency(run_dir, rows)
    return plot_ttft_cdf({k: ttft_samples(ps) for k, ps in files.items()}, out, run_id)


def _cdf_panels(rows: Sequence[Mapping[str, Any]]) -> int:
    """The TTFT CDF's panels, as planned without reading a file: the concurrencies of rows that name one."""
    concs = {r.get("concurrency") for r in rows if (r.get("request_file") or r.get("point_id"))}
    return max(1, len({c for c in concs if isinstance(c, int)}))


def plot_tasks(
    run_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
    slo: Sequence[str] = (),
) -> list[PlotTask]:
    """Every plot of the run into ``run_dir/plots/``, in a fixed order (the same rows and verdicts give the same
    tasks: a drawing child plans them again from the run's files); planning reads no per-request file."""
    plots = run_dir / "plots"
    run_id = next((str(r["run_id"]) for r in rows if r.get("run_id")), run_dir.name)
    serve = [r for r in rows if r.get("kind", "serve") == "serve"]
    tasks = [
        PlotTask(
            "throughput_vs_chunk.png",
            1,
            partial(plot_throughput_vs_chunk, serve, plots / "throughput_vs_chunk.png", run_id),
        ),
        PlotTask(
            "ttft_vs_concurrency.png",
            1,
            partial(plot_ttft_vs_concurrency, rows, plots / "ttft_vs_concurrency.png", run_id),
        ),
        PlotTask(
            "ttft_cdf.png", _cdf_panels(rows), partial(_draw_ttft_cdf, run_dir, rows, plots / "ttft_cdf.png", run_id)
        ),
    ]
    for i, v in enumerate(x for x in verdicts if x.get("kind") == "search"):
        name = search_plot_name(i, v)
        tasks.append(PlotTask(name, 1, partial(plot_search, v, plots / name, slo, run_id)))
    for v in verdicts:
        if v.get("kind") == "chunk_curve":
            name = chunk_curve_plot_name(v)
            tasks.append(PlotTask(name, 1, partial(plot_chunk_curve, v, plots / name, rows, run_id)))
    return tasks


def render_all(
    run_dir: Path,
    rows: Sequence[Mapping[str, Any]],
    verdicts: Sequence[Mapping[str, Any]],
    backends: Iterable[str] = (),
    slo: Sequence[str] = (),
) -> list[Path]:
    """Every plot of the run into ``run_dir/plots/``, drawn in this process; returns the files written."""
    drawn = [task.draw() for task in plot_tasks(run_dir, rows, verdicts, slo)]
    return [p for p in drawn if p is not None]
