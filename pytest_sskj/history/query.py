"""``history`` (every stored point across runs, filtered) and ``compare A B`` (point-by-point deltas).

``compare`` matches serving configurations (backend, chunk, concurrency) of two runs of the same shape and
judges each with :func:`pytest_sskj.acceptance.compare.compare` over the runs' repeats (the unit of
replication): medians over repeats, the relative delta and its confidence interval, ``better`` / ``worse``
/ ``equivalent`` / ``inconclusive``.  Runs whose recorded environment differs (engine, model, platform,
layout, endpoint, shape, or any recorded engine fact: versions, commits, driver, GPU) are refused, or with
``allow_incomparable`` compared and marked ``incomparable``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sskj.history.gate import Baseline, engine_differences, incomparable

__all__ = [
    "HISTORY_COLUMNS",
    "Comparison",
    "Filters",
    "compare_runs",
    "history_rows",
    "render_compare",
    "render_rows",
]

HISTORY_COLUMNS = (
    "run_id",
    "started_at",
    "tags",
    "platform",
    "model",
    "engine",
    "layout",
    "config",
    "shape",
    "backend",
    "chunk",
    "concurrency",
    "repeat",
    "status",
    "input_throughput",
    "median_ttft_ms",
    "p95_ttft_ms",
    "median_tpot_ms",
    "p95_tpot_ms",
    "slo_met",
)


@dataclass(frozen=True)
class Filters:
    """``history`` filters; ``None`` matches everything.  ``shape`` is ``ISL512/OSL16`` or ``512/16``;
    ``since`` / ``until`` are ISO dates compared with the run's start; ``layout`` matches a point's own layout
    (its name, ``tp4dp2``; the deployment kind, ``pd``; or its config, ``TP4/EP1/DP2/PP1``)."""

    platform: str | None = None
    model: str | None = None
    engine: str | None = None
    backend: str | None = None
    layout: str | None = None
    shape: str | None = None
    since: str | None = None
    until: str | None = None
    tag: str | None = None
    run: str | None = None

    def shape_key(self) -> str | None:
        if self.shape is None:
            return None
        s = self.shape.upper().replace(" ", "")
        if "ISL" not in s and "/" in s:
            isl, osl = s.split("/", 1)
            s = f"ISL{isl}/OSL{osl}"
        return s

    def run_ok(self, run: Mapping[str, Any]) -> bool:
        for key, want in (("platform", self.platform), ("model", self.model), ("engine", self.engine)):
            if want is not None and str(run.get(key)) != want:
                return False
        started = str(run.get("started_at") or "")
        if self.since and started[:10] < self.since:
            return False
        if self.until and started[:10] > self.until:
            return False
        if self.tag is not None and self.tag not in run.get("tags", []):
            return False
        return self.run is None or run.get("run_id") == self.run


_METRICS = ("input_throughput", "median_ttft_ms", "p95_ttft_ms", "median_tpot_ms", "p95_tpot_ms")


def history_rows(db: Any, filters: Filters) -> list[dict[str, Any]]:
    """One dict per stored point of every run that passes ``filters`` (oldest run first)."""
    runs = [r for r in db.runs() if filters.run_ok(r)]
    by_id = {r["run_id"]: r for r in runs}
    out = []
    for p in db.points_of(list(by_id)):
        row = _point_row(p, by_id[p["run_id"]], filters)
        if row is not None:
            out.append(row)
    order = {r["run_id"]: i for i, r in enumerate(runs)}
    out.sort(key=lambda r: (order[r["run_id"]], str(r["backend"]), r["chunk"] or 0, r["concurrency"] or 0))
    return out


def _point_row(p: Mapping[str, Any], run: Mapping[str, Any], filters: Filters) -> dict[str, Any] | None:
    """One stored point of ``run`` as a history row; ``None`` when its backend, layout or shape is filtered out."""
    if filters.backend is not None and p.get("backend") != filters.backend:
        return None
    layout, config = p.get("layout"), p.get("config") or run.get("layout")  # rows before schema 0002: the run's
    if filters.layout is not None and filters.layout not in (layout, config):
        return None
    shape = f"ISL{p['isl']}/OSL{p['osl']}" if p.get("isl") is not None else run.get("shape")
    if filters.shape_key() is not None and str(shape).upper() != filters.shape_key():
        return None
    metrics = p.get("metrics") or {}
    return {
        **{k: run.get(k) for k in ("run_id", "started_at", "tags", "platform", "model", "engine")},
        "layout": layout,
        "config": config,
        "shape": shape,
        **{k: p.get(k) for k in ("backend", "chunk", "concurrency", "repeat", "status")},
        **{k: metrics.get(k) for k in _METRICS},
        "slo_met": p.get("slo_met") or {},
    }


def _cell(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, list):
        return ",".join(map(str, v)) or "-"
    if isinstance(v, dict):
        return " ".join(f"{k}:{'met' if ok else 'n/j' if ok is None else 'MISS'}" for k, ok in v.items()) or "-"
    return str(v)


def render_rows(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], fmt: str) -> str:
    """``rows`` as an aligned text table, ``json`` or ``csv``."""
    if fmt == "json":
        return json.dumps([{c: r.get(c) for c in columns} for r in rows], indent=1, sort_keys=False, default=str)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(
                [
                    json.dumps(r.get(c), sort_keys=True) if isinstance(r.get(c), (dict, list)) else r.get(c)
                    for c in columns
                ]
            )
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [" | ".join(x.ljust(w) for x, w in zip(xs, widths, strict=True)).rstrip() for xs in cells]
    return "\n".join(lines)


@dataclass
class Comparison:
    """``compare A B``: per configuration, the repeat-level verdict of B against A."""

    a: Baseline
    b: Baseline
    problems: list[str] = field(default_factory=list)
    points: list[dict[str, Any]] = field(default_factory=list)


def _configs(base: Baseline) -> dict[tuple[str, str, str], list[Any]]:
    from pytest_sskj.acceptance.compare import RepeatSample

    out: dict[tuple[str, str, str], list[Any]] = {}
    for r in base.rows:
        if r.get("status") != "passed" or r.get("kind", "serve") != "serve":
            continue
        key = (str(r.get("backend")), str(r.get("chunk")), str(r.get("concurrency")))
        out.setdefault(key, []).append(RepeatSample.from_row(r))
    return out


def compare_runs(
    a: Baseline,
    b: Baseline,
    *,
    allow_incomparable: bool = False,
    margin_pct: float = 0.0,
    noise: Mapping[tuple[str, str, str], float] | None = None,
) -> Comparison:
    """Compare every configuration the two runs share; ``problems`` says why they are not comparable.

    ``noise``: the between-run noise (|delta| %, primary metric) per configuration from stored A/A run pairs
    (:func:`pytest_sskj.history.gate.between_run_noise`); a configuration without one is inconclusive."""
    from pytest_sskj.acceptance.compare import compare
    from pytest_sskj.history.gate import judge_between_runs

    out = Comparison(a, b)
    if a.facts.get("shape") != b.facts.get("shape"):
        out.problems.append(f"shape {a.facts.get('shape')} in {a.run_id}, {b.facts.get('shape')} in {b.run_id}")
    out.problems += incomparable(b.facts, a.facts) + engine_differences(a, b.facts)
    if out.problems and not allow_incomparable:
        return out
    ca, cb = _configs(a), _configs(b)
    for key in sorted(set(ca) | set(cb)):
        entry: dict[str, Any] = {"backend": key[0], "chunk": key[1], "concurrency": key[2]}
        if key not in ca or key not in cb:
            entry.update(outcome="unmatched", note=f"only in {a.run_id if key in ca else b.run_id}")
        else:
            if noise is None:
                v = compare(a.run_id, b.run_id, ca[key], cb[key], margin_pct=margin_pct, incomparable=out.problems)
            else:
                v = judge_between_runs(a.run_id, b.run_id, ca[key], cb[key], noise.get(key), margin_pct, out.problems)
            entry.update(v.as_dict(), repeats=[len(ca[key]), len(cb[key])])
        out.points.append(entry)
    return out


def render_compare(c: Comparison, fmt: str) -> str:
    """The comparison as text (one line per configuration and metric), or JSON."""
    if fmt == "json":
        return json.dumps(
            {"a": c.a.run_id, "b": c.b.run_id, "problems": c.problems, "points": c.points}, indent=1, default=str
        )
    from pytest_sskj.acceptance.compare import fmt_pct

    head = [f"compare {c.a.named} -> {c.b.named}"]
    head += [f"INCOMPARABLE: {p}" for p in c.problems]
    rows = []
    for p in c.points:
        for m in p.get("metrics") or [{"name": "-", "outcome": p.get("outcome"), "delta_pct": None}]:
            ci = (
                f"{fmt_pct(m.get('ci_low_pct'))} … {fmt_pct(m.get('ci_high_pct'))}"
                if m.get("ci_low_pct") is not None
                else "n/a"
            )
            rows.append(
                {
                    "Chunk": p["chunk"],
                    "C": p["concurrency"],
                    "Backend": p["backend"],
                    "Repeats": "/".join(map(str, p.get("repeats") or [])) or "-",
                    "Metric": m.get("label") or m.get("name"),
                    "A": m.get("baseline"),
                    "B": m.get("candidate"),
                    "Delta": fmt_pct(m.get("delta_pct")),
                    "95% CI": ci,
                    "Outcome": p.get("outcome")
                    if p.get("outcome") in ("incomparable", "unmatched")
                    else m.get("outcome"),
                }
            )
    cols = ("Chunk", "C", "Backend", "Repeats", "Metric", "A", "B", "Delta", "95% CI", "Outcome")
    return "\n".join([*head, render_rows(rows, cols, "text") if rows else "no configuration to compare"])
