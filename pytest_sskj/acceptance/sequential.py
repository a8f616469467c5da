"""The sequential design of an A/B comparison and its power planner (method in ``docs/verdicts.md``).

``--repeats R`` is the first look, ``--sskj-max-repeats N`` the last: after repeat ``n`` of both sides
(``R <= n <= N``) the comparison is judged at the nominal two-sided level :meth:`Design.look_alpha`, and
the runner adds one more interleaved A/B repeat pair only while the verdict is statistically
inconclusive.  The levels are the increments of a Lan-DeMets alpha-spending function (Lan & DeMets 1983)
of the Kim-DeMets power family with rho = 2, ``alpha(t) = alpha * t**2`` with information fraction
``t = n / N`` (Kim & DeMets 1987; Jennison & Turnbull 2000, section 7.3); the
looks are combined by the Bonferroni inequality (the probability that any look claims a difference is at
most the sum of the spent levels, ``alpha(1) = alpha``), so the overall false-positive rate holds with the
small-sample Welch t statistic, whose looks' correlation is not known in closed form.  With ``N = R``
there is one look at the full ``alpha``: the fixed design of ``sskj-verdict/2``.

:func:`plan_repeats` is the planner: the repeats per side that decide a stated difference with 90 %
power at a given between-repeat spread (Welch t, normal approximation refined with Student quantiles).
Pure functions; no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_sskj.acceptance.compare import MIN_REPEATS, Verdict, t_quantile

__all__ = [
    "DESIGN_NAME",
    "PLAN_POWER",
    "Design",
    "Look",
    "dry_run_lines",
    "log_spread_pct",
    "plan_line",
    "plan_repeats",
    "repeat_seconds",
    "run_sequential",
    "should_continue",
]

DESIGN_NAME = (
    "group-sequential, Lan-DeMets alpha spending alpha*t^2 (Kim-DeMets power family), Bonferroni-combined looks"
)
SPENDING_RHO = 2.0
PLAN_POWER = 0.90
"""The power the planner plans for."""


def _spend(t: float, alpha: float) -> float:
    """The cumulative alpha spent at information fraction ``t``: ``alpha * t**rho`` (power family, rho 2)."""
    t = min(1.0, max(0.0, t))
    return float(alpha * t**SPENDING_RHO)


@dataclass(frozen=True)
class Design:
    """Looks after repeat ``first`` .. ``last`` of both sides, overall two-sided level ``alpha``."""

    first: int
    last: int
    alpha: float = 0.05

    @property
    def sequential(self) -> bool:
        return self.last > self.first

    def look_alpha(self, n: int) -> float:
        """The nominal two-sided level of the look after repeat ``n`` (the spent increment)."""
        if not self.sequential:
            return self.alpha
        n = min(max(n, self.first), self.last)
        prev = _spend((n - 1) / self.last, self.alpha) if n > self.first else 0.0
        return _spend(n / self.last, self.alpha) - prev

    def look_confidence(self, n: int) -> float:
        return 1.0 - self.look_alpha(n)

    def describe(self) -> str:
        if not self.sequential:
            return f"fixed design: one look after {self.first} repeats per side at alpha {self.alpha:g}"
        return (
            f"{DESIGN_NAME}: looks after {self.first}..{self.last} repeats per side, overall alpha {self.alpha:g} "
            f"(first look at {self.look_alpha(self.first):.4f}, last at {self.look_alpha(self.last):.4f})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "design": DESIGN_NAME if self.sequential else "fixed",
            "first": self.first,
            "last": self.last,
            "alpha": self.alpha,
            "look_alpha": {n: self.look_alpha(n) for n in range(self.first, self.last + 1)},
        }


@dataclass(frozen=True)
class Look:
    """One interim analysis: after which repeat, at which level, with which statistic, and what it decided."""

    repeats: int
    alpha: float
    outcome: str
    delta_pct: float | None
    ci: tuple[float, float] | None
    t: float | None
    df: float | None
    action: str
    """``stop`` or ``continue``, with :attr:`why`."""
    why: str

    def text(self) -> str:
        stat = f"Welch t {self.t:+.2f} (df {self.df:.1f})" if self.t is not None and self.df is not None else "no t"
        ci = f", CI {self.ci[0]:+.2f} … {self.ci[1]:+.2f} %" if self.ci else ""
        return (
            f"after repeat {self.repeats}: {stat} at alpha {self.alpha:.4f}{ci} -> {self.outcome}; "
            f"{self.action} ({self.why})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "repeats": self.repeats,
            "alpha": self.alpha,
            "outcome": self.outcome,
            "delta_pct": self.delta_pct,
            "ci": list(self.ci) if self.ci else None,
            "t": self.t,
            "df": self.df,
            "statistic": "Welch t on log input_throughput per repeat",
            "action": self.action,
            "why": self.why,
            "text": self.text(),
        }


def should_continue(v: Verdict, n: int, design: Design) -> tuple[bool, str]:
    """Whether another A/B repeat pair can still decide ``v`` (judged after repeat ``n``), and why."""
    if v.outcome != "inconclusive":
        return False, f"decided {v.outcome}"
    if v.blocked:
        return False, "more repeats cannot decide it: " + "; ".join(v.reasons)
    if n >= design.last:
        return False, f"reached the maximum of {design.last} repeats per side (--sskj-max-repeats)"
    return True, "still inconclusive"


def log_spread_pct(values: Sequence[float]) -> float | None:
    """The between-repeat spread of positive ``values``: the sample SD of their logs, as a percent."""
    logs = [math.log(v) for v in values if v > 0]
    if len(logs) < MIN_REPEATS:
        return None
    m = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / (len(logs) - 1))
    return math.expm1(sd) * 100.0


def plan_repeats(
    diff_pct: float, spread_pct: float, *, alpha: float = 0.05, power: float = PLAN_POWER, limit: int = 1000
) -> int | None:
    """Repeats per side so a true ``diff_pct`` is decided (CI clear of 0) with ``power`` at ``spread_pct``.

    ``None`` when not within ``limit`` repeats (or the difference is 0).
    """
    effect = abs(math.log1p(diff_pct / 100.0))
    sd = math.log1p(max(spread_pct, 0.0) / 100.0)
    if effect <= 0.0:
        return None
    if sd <= 0.0:
        return MIN_REPEATS
    for n in range(MIN_REPEATS, limit + 1):
        df = 2.0 * n - 2.0
        need = t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)
        if effect / (sd * math.sqrt(2.0 / n)) >= need:
            return n
    return None


def _minutes(seconds: float) -> str:
    return f"about {seconds / 60.0:.0f} min" if seconds >= 90 else f"about {seconds:.0f} s"


def plan_line(
    diff_pct: float,
    spread_pct: float | None,
    *,
    observed: bool,
    repeat_s: float | None = None,
    alpha: float = 0.05,
) -> str:
    """``to decide 5 % at the observed 3.1 % spread: 7 repeats per side, about 9 min``."""
    if spread_pct is None:
        return f"to decide {diff_pct:g} %: the spread is not known yet (needs {MIN_REPEATS} repeats per side)"
    n = plan_repeats(diff_pct, spread_pct, alpha=alpha)
    where = "the observed" if observed else "a given"
    head = f"to decide {diff_pct:g} % at {where} {spread_pct:.1f} % spread ({PLAN_POWER:.0%} power)"
    if n is None:
        return f"{head}: more than 1000 repeats per side (not decidable here)"
    when = f", {_minutes(2 * n * repeat_s)} for both sides" if repeat_s else ""
    return f"{head}: {n} repeats per side{when}"


def repeat_seconds(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The mean wall time of one repeat (server start + warmup + measured requests) over ``rows``."""
    walls = [float(w) for r in rows if isinstance(w := r.get("wall_s"), (int, float)) and w > 0]
    return sum(walls) / len(walls) if walls else None


def run_sequential(
    design: Design,
    judge: Callable[[int, float], Verdict | None],
    extend: Callable[[int], None],
) -> Verdict | None:
    """Judge after repeat ``design.first``; while :func:`should_continue`, ``extend(n + 1)`` (measure one more
    A/B repeat pair) and judge again.  The verdict carries every look (:attr:`Verdict.looks`).

    ``judge(n, confidence)`` compares the first ``n`` repeats of each side at the look's level; ``None``
    when a side has no usable repeat (nothing to decide, no more repeats are added).
    """
    looks: list[Look] = []
    n = design.first
    while True:
        alpha = design.look_alpha(n)
        v = judge(n, 1.0 - alpha)
        if v is None:
            return None
        go, why = should_continue(v, n, design)
        p = v.primary
        ci = (p.ci_low_pct, p.ci_high_pct) if p.ci_low_pct is not None and p.ci_high_pct is not None else None
        looks.append(Look(n, alpha, v.outcome, p.delta_pct, ci, p.t_stat, p.df, "continue" if go else "stop", why))
        if not go:
            design_text = design.describe() if design.sequential else ""
            return replace(v, looks=tuple(x.as_dict() for x in looks) if design.sequential else (), design=design_text)
        n += 1
        extend(n)


def _earlier_repeat_seconds(reports_dir: Path, run_id: str, backends: Sequence[str]) -> tuple[float, str] | None:
    """The mean ``wall_s`` of the latest earlier run's passed points of ``backends`` (for the dry run's estimate)."""
    import json

    for run in sorted((p for p in reports_dir.glob("*/points") if p.parent.name != run_id), reverse=True)[:5]:
        rows = []
        for f in run.glob("*/result.json"):
            try:
                row = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(row, dict) and row.get("status") == "passed" and row.get("backend") in backends:
                rows.append(row)
        secs = repeat_seconds(rows)
        if secs is not None:
            return secs, run.parent.name
    return None


def dry_run_lines(settings: Any) -> list[str]:
    """The dry run's verdict plan: the design, and the repeats per side that decide the planned difference."""
    s = settings
    design = Design(s.repeats, max(s.repeats, s.max_repeats or s.repeats))
    spread = s.plan_spread_pct if s.plan_spread_pct is not None else 3.0
    earlier = _earlier_repeat_seconds(Path(s.reports_dir), str(s.run_id), tuple(s.backends))
    line = plan_line(s.plan_difference_pct, spread, observed=False, repeat_s=earlier[0] if earlier else None)
    if s.plan_spread_pct is None:
        line = line.replace("at a given", "at an assumed", 1) + " (set --sskj-plan-spread)"
    when = (
        f"; time from run {earlier[1]}: {earlier[0]:.0f} s per repeat"
        if earlier
        else "; time: no earlier run here to estimate a repeat from"
    )
    from pytest_sskj.bench.metrics import percentile_problems

    warn = [f"WARNING: {w}" for w in percentile_problems(s.slo, s.requests)]
    return [f"verdicts: {design.describe()}", f"plan: {line}{when}", *warn]
