"""Measure one recommendation cell: every layout's concurrencies (a search, or the fixed list), then judge.

For each layout of the run at one (shape, backend, chunk): with ``--sskj-search double|add16`` the
adaptive search runs on that layout (steps are single measurements, kept for the plot) and its highest
SLO-meeting concurrency is then measured ``--repeats`` times; the fixed ``--concurrency`` points (measured
by ``test_serving`` already, or now) are candidates too.  Candidates are ranked by
:func:`pytest_sskj.deploy.recommend.recommend`; the ranked table and every candidate land in
``<run dir>/recommendation/<id>.csv|.json`` and the plot in ``<run dir>/plots/recommendation-<id>.png``
as soon as the cell is judged.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_sskj.acceptance.matrix import Point, Shape
from pytest_sskj.acceptance.search import judge, search, slo_view
from pytest_sskj.acceptance.store import atomic_write_json
from pytest_sskj.deploy.layouts import shape_id
from pytest_sskj.deploy.recommend import Candidate, Recommendation, candidate_from_rows, recommend
from pytest_sskj.settings import Settings

__all__ = ["RecommendKey", "measure_recommendation", "recommend_keys"]


@dataclass(frozen=True)
class RecommendKey:
    """One recommendation cell: a shape, a backend and a chunk (layouts x concurrencies inside)."""

    shape: Shape
    backend: str
    chunk: int | None

    @property
    def id(self) -> str:
        return f"{shape_id(self.shape)}-{self.backend}" + ("" if self.chunk is None else f"-chunk{self.chunk}")


def recommend_keys(settings: Settings) -> list[RecommendKey]:
    """Every cell of a run with layouts (none without ``--layout``)."""
    if not settings.layouts:
        return []
    chunks = tuple(settings.chunks) or (None,)
    return [RecommendKey(sh, b, c) for sh in settings.shapes for c in chunks for b in settings.backends]


def _candidate(acc: Any, layout: str, key: RecommendKey, conc: int) -> Candidate:
    s: Settings = acc.settings
    outs = [
        acc.serve(Point(key.backend, key.chunk, conc, r, s.repeats, "serve", layout, key.shape))
        for r in range(1, s.repeats + 1)
    ]
    passed = [o.row for o in outs if o.passed]
    verdicts = [judge(s.slo, row, osl=key.shape[1]) for row in passed]
    return candidate_from_rows(
        layout,
        conc,
        [o.row for o in outs],
        metric=s.recommend_metric,
        slo_results=[ok for ok, _ in verdicts],
        slo_metrics=[slo_view(row, osl=key.shape[1]) for row in passed],
    )


def _search_steps(acc: Any, layout: str, key: RecommendKey) -> tuple[int | None, list[dict[str, Any]]]:
    s: Settings = acc.settings

    def measure(c: int) -> dict[str, Any]:
        out = acc.serve(Point(key.backend, key.chunk, c, 0, 0, "search", layout, key.shape))
        m: dict[str, Any] = {
            k: v for k, v in out.row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        m["ok"] = out.passed and not out.row.get("client_bound")
        if not m["ok"]:
            m["error"] = "client-bound" if out.passed else (out.message.splitlines() or [out.status])[0]
        return m

    res = search(s.search, measure, s.slo, osl=key.shape[1], max_c=s.search_max)
    steps = [
        {
            "layout": layout,
            "concurrency": st.concurrency,
            "throughput": st.metrics.get(s.recommend_metric),
            "slo_ok": st.slo_ok,
            "valid": st.metrics.get("ok") is not False,
            "kind": "search step",
        }
        for st in res.steps
    ]
    return res.best, steps


def measure_recommendation(acc: Any, key: RecommendKey) -> tuple[Recommendation, list[dict[str, Any]]]:
    """Measure every layout of ``key`` and judge; returns the recommendation and the search steps."""
    s: Settings = acc.settings
    cands: list[Candidate] = []
    steps: list[dict[str, Any]] = []
    for lay in s.layouts:
        concs = list(s.concurrencies)
        if s.search != "none":
            best, st = _search_steps(acc, lay.name, key)
            steps += st
            if best is not None and best not in concs:
                concs.append(best)
        cands += [_candidate(acc, lay.name, key, c) for c in concs]
    rec = recommend(
        key.id,
        [lay.name for lay in s.layouts],
        cands,
        metric=s.recommend_metric,
        expect_layout=s.expect_layout,
        floor=s.throughput_floor,
    )
    return rec, steps


def write_outputs(run_dir: Path, rec: Recommendation, steps: list[dict[str, Any]]) -> dict[str, Path | None]:
    """The ranked table as CSV, everything as JSON, and the plot; returns their paths (plot may be None)."""
    out = run_dir / "recommendation"
    out.mkdir(parents=True, exist_ok=True)
    header, rows = rec.table()
    csv_path = out / f"{rec.id}.csv"
    tmp = csv_path.with_name(f".{csv_path.name}.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    tmp.replace(csv_path)
    json_path = out / f"{rec.id}.json"
    atomic_write_json(json_path, {**rec.as_dict(), "search_steps": steps})
    from pytest_sskj.deploy.plot import plot_recommendation

    plot = plot_recommendation(rec, steps, run_dir / "plots" / f"recommendation-{rec.id}.png")
    return {"csv": csv_path, "json": json_path, "plot": plot}
