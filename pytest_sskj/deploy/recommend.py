"""The recommendation verdict: which layout, at which concurrency, meets the SLO with the highest throughput.

Per (shape, backend, chunk) of a run with ``--layout``: every layout's measured concurrencies become
:class:`Candidate` rows (median of the passed repeats at that concurrency; the repeat is the unit of
replication).  A candidate is *eligible* only when every repeat passed the strict oracle, none was
client-bound and every repeat met every SLO gate; invalid (client-bound) and failed points never win.
Each layout's best point is its eligible candidate with the highest median throughput; the layouts are
ranked by it.  The winner is *conclusive* when it is the only layout meeting the SLO, or when its
slowest repeat beats the runner-up's fastest (both with at least :data:`MIN_REPEATS` repeats; the message
gives the chance an A/A pair does that); otherwise the verdict
says "inconclusive" and names the tie, and an expected winner (``--sskj-expect-layout``) is not
confirmed.  Pure: no I/O (the caller measures, writes the CSV/JSON and draws the plot).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MIN_REPEATS",
    "Candidate",
    "LayoutBest",
    "Recommendation",
    "aa_overlap_free_p",
    "candidate_from_rows",
    "recommend",
]

MIN_REPEATS = 3
"""Repeats each side needs before a lead can be conclusive: with 2 vs 2 an A/A pair has non-overlapping ranges by
chance one time in three; with 3 vs 3 one time in ten (:func:`aa_overlap_free_p`)."""


def aa_overlap_free_p(n1: int, n2: int) -> float:
    """Chance that two samples of one distribution (A/A) have non-overlapping ranges, either way round."""
    return 2.0 / math.comb(n1 + n2, n1)


@dataclass(frozen=True)
class Candidate:
    """One layout at one concurrency: its repeats' throughputs and whether it may win."""

    layout: str
    concurrency: int
    throughputs: tuple[float, ...]
    """Throughput of every passed repeat (the ranking metric, e.g. total_throughput in tok/s)."""
    repeats: int
    passed: int
    slo_ok: bool | None
    """Every passed repeat met every gate (``None``: nothing passed, so not judged)."""
    client_bound: bool
    reasons: tuple[str, ...] = ()
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    """Medians over the passed repeats of the SLO metrics (p95_ttft_ms, p95_tpot_ms, ...)."""

    @property
    def throughput(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None

    @property
    def eligible(self) -> bool:
        return (
            self.passed == self.repeats
            and self.passed > 0
            and not self.client_bound
            and self.slo_ok is True
            and self.throughput is not None
        )

    def status(self) -> str:
        if self.passed < self.repeats:
            return f"failed ({self.repeats - self.passed}/{self.repeats} repeats did not pass)"
        if self.client_bound:
            return "invalid (client-bound)"
        if self.slo_ok is False:
            return "SLO miss"
        return "ok" if self.eligible else "not judged"

    def as_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "concurrency": self.concurrency,
            "throughput": self.throughput,
            "throughputs": list(self.throughputs),
            "repeats": self.repeats,
            "passed": self.passed,
            "slo_ok": self.slo_ok,
            "client_bound": self.client_bound,
            "eligible": self.eligible,
            "status": self.status(),
            "reasons": list(self.reasons),
            **{k: v for k, v in self.metrics.items()},
        }


@dataclass(frozen=True)
class LayoutBest:
    """A layout's best eligible point, or why it has none."""

    layout: str
    best: Candidate | None
    why_none: str = ""


@dataclass(frozen=True)
class Recommendation:
    """The verdict of one (shape, backend, chunk)."""

    id: str
    metric: str
    ranked: tuple[LayoutBest, ...]
    candidates: tuple[Candidate, ...]
    conclusive: bool
    expect_layout: str | None = None
    floor: float | None = None

    @property
    def winner(self) -> Candidate | None:
        return self.ranked[0].best if self.ranked and self.ranked[0].best is not None else None

    @property
    def outcome(self) -> str:
        """``recommended``, ``inconclusive`` or ``none_meets_slo``."""
        if self.winner is None:
            return "none_meets_slo"
        return "recommended" if self.conclusive else "inconclusive"

    @property
    def passed(self) -> bool:
        w = self.winner
        if w is None:
            return False
        if self.expect_layout is not None and not (self.conclusive and w.layout == self.expect_layout):
            return False
        if self.floor is not None and (w.throughput is None or w.throughput < self.floor):
            return False
        return True

    def _lead(self) -> str:
        w = self.winner
        second = self.ranked[1].best if len(self.ranked) > 1 else None
        if w is None or second is None or not second.throughput or w.throughput is None:
            return "the only layout meeting the SLO" if w is not None else ""
        lead = (w.throughput / second.throughput - 1) * 100
        if self.conclusive:
            p = aa_overlap_free_p(len(w.throughputs), len(second.throughputs))
            return (
                f"{lead:+.1f} % over {second.layout} C={second.concurrency} (repeat ranges do not overlap; "
                f"an A/A pair does so by chance with p = {p:.2f})"
            )
        return (
            f"inconclusive: {lead:+.1f} % over {second.layout} C={second.concurrency}, but their repeats overlap "
            f"or are too few ({len(w.throughputs)} vs {len(second.throughputs)})"
        )

    def message(self) -> str:
        w = self.winner
        if w is None:
            why = "; ".join(f"{b.layout}: {b.why_none}" for b in self.ranked)
            return f"{self.id}: no layout x concurrency meets the SLO with every repeat passing ({why})"
        text = (
            f"{self.id}: recommended {w.layout} at C={w.concurrency}, {self.metric} {w.throughput:.2f} "
            f"(median of {len(w.throughputs)}); {self._lead()}"
        )
        if self.expect_layout is not None:
            ok = self.conclusive and w.layout == self.expect_layout
            text += f"; expected {self.expect_layout}: {'confirmed' if ok else 'NOT confirmed'}"
        if self.floor is not None:
            met = w.throughput is not None and w.throughput >= self.floor
            text += f"; floor {self.floor:g}: {'met' if met else 'NOT met'}"
        return text

    def table(self) -> tuple[list[str], list[list[Any]]]:
        """The ranked table: one row per layout (its best point)."""
        header = ["Rank", "Layout", "Best C", self.metric, "Repeats", "TTFT P95 ms", "TPOT P95 ms", "Status"]
        rows: list[list[Any]] = []
        for i, b in enumerate(self.ranked, 1):
            c = b.best
            if c is None:  # no eligible point: show its highest measured one, with why it cannot win
                seen = [x for x in self.candidates if x.layout == b.layout and x.throughput is not None]
                top = max(seen, key=lambda x: x.throughput or 0.0, default=None)
                if top is None:
                    rows.append(["-", b.layout, "-", "n/a", "-", "-", "-", b.why_none])
                else:
                    rows.append(
                        [
                            "-",
                            b.layout,
                            top.concurrency,
                            f"{top.throughput:.2f}",
                            f"{top.passed}/{top.repeats}",
                            _fmt(top.metrics.get("p95_ttft_ms")),
                            _fmt(top.metrics.get("p95_tpot_ms")),
                            f"cannot win: {b.why_none}",
                        ]
                    )
                continue
            rows.append(
                [
                    i,
                    b.layout,
                    c.concurrency,
                    f"{c.throughput:.2f}" if c.throughput is not None else "n/a",
                    f"{c.passed}/{c.repeats}",
                    _fmt(c.metrics.get("p95_ttft_ms")),
                    _fmt(c.metrics.get("p95_tpot_ms")),
                    "winner" if i == 1 else "ok",
                ]
            )
        return header, rows

    def as_dict(self) -> dict[str, Any]:
        header, rows = self.table()
        w = self.winner
        return {
            "outcome": self.outcome,
            "passed": self.passed,
            "conclusive": self.conclusive,
            "metric": self.metric,
            "winner": None
            if w is None
            else {"layout": w.layout, "concurrency": w.concurrency, "throughput": w.throughput},
            "expect_layout": self.expect_layout,
            "floor": self.floor,
            "message": self.message(),
            "ranked": [
                {"layout": b.layout, "best": b.best.as_dict() if b.best else None, "why_none": b.why_none}
                for b in self.ranked
            ],
            "candidates": [c.as_dict() for c in self.candidates],
            "section": {"title": f"Recommendation {self.id}", "header": header, "rows": rows},
        }


def _fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"


def _best(layout: str, cands: Sequence[Candidate]) -> LayoutBest:
    mine = [c for c in cands if c.layout == layout]
    ok = [c for c in mine if c.eligible]
    if not ok:
        seen = ", ".join(f"C={c.concurrency} {c.status()}" for c in mine) or "nothing measured"
        return LayoutBest(layout, None, seen)
    return LayoutBest(layout, max(ok, key=lambda c: (c.throughput or 0.0, -c.concurrency)))


def recommend(
    rec_id: str,
    layouts: Sequence[str],
    candidates: Sequence[Candidate],
    *,
    metric: str,
    expect_layout: str | None = None,
    floor: float | None = None,
) -> Recommendation:
    """Rank ``layouts`` by their best eligible candidate and judge the winner's lead."""
    bests = [_best(lay, candidates) for lay in layouts]
    ranked = sorted(bests, key=lambda b: (b.best is None, -(b.best.throughput or 0.0) if b.best else 0.0))
    winner = ranked[0].best if ranked else None
    second = ranked[1].best if len(ranked) > 1 else None
    if winner is None:
        conclusive = False
    elif second is None:
        conclusive = True
    else:
        enough = len(winner.throughputs) >= MIN_REPEATS and len(second.throughputs) >= MIN_REPEATS
        conclusive = enough and min(winner.throughputs) > max(second.throughputs)
    return Recommendation(rec_id, metric, tuple(ranked), tuple(candidates), conclusive, expect_layout, floor)


def candidate_from_rows(
    layout: str,
    concurrency: int,
    rows: Sequence[Mapping[str, Any]],
    *,
    metric: str,
    slo_results: Sequence[bool],
    slo_metrics: Sequence[Mapping[str, float | None]],
) -> Candidate:
    """A candidate from the result rows of its repeats; ``slo_results``/``slo_metrics`` per passed row."""
    passed = [r for r in rows if r.get("status") == "passed"]
    tps = []
    for r in passed:
        v = r.get(metric)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            tps.append(float(v))
    reasons = tuple(str(x) for r in rows if r.get("status") != "passed" for x in (r.get("reasons") or [])[:1])
    medians: dict[str, float | None] = {}
    for name in ("p95_ttft_ms", "p95_tpot_ms"):
        vals = [float(v) for m in slo_metrics if isinstance(v := m.get(name), (int, float))]
        medians[name] = statistics.median(vals) if vals else None
    return Candidate(
        layout=layout,
        concurrency=concurrency,
        throughputs=tuple(tps),
        repeats=len(rows),
        passed=len(passed),
        slo_ok=all(slo_results) if slo_results else None,
        client_bound=any(bool(r.get("client_bound")) for r in passed),
        reasons=reasons,
        metrics=medians,
    )
