"""Candidate vs baseline: the A/B verdict ("FlashInfer >= Marlin") with the repeat as the unit of replication.

The method (version :data:`METHOD_VERSION`, written down in ``docs/verdicts.md``): every repeat (one
server run of a point) contributes one value per metric (its input throughput, its TTFT P50, its TTFT
P95, as the bench computes them).  Requests inside one run are not independent (they share the server's
state, the machine's load and the drift of that minute), so they are never resampled.  Per metric, the
difference is the ratio of the geometric means of the per-repeat values; its confidence interval is
Welch's t interval on the log per-repeat values (unequal variances, Welch-Satterthwaite degrees of
freedom), so between-repeat variance is what decides.  A side with fewer than
:data:`MIN_REPEATS` usable repeats cannot be judged.

Outcome of a metric (improvement = the change in the metric's good direction, in percent):

- ``better``: the whole interval of the improvement lies above ``threshold`` (the margin, or the run's
  A/A noise floor when that is larger);
- ``worse``: the whole interval lies below the margin (with margin 0: a significant loss);
- ``equivalent``: the whole interval lies within +-``equivalence_pct``;
- ``inconclusive``: none of these.

The verdict's outcome is the primary metric's (input throughput); a secondary metric that is
significantly worse turns ``better`` into ``inconclusive`` (a trade-off is not a win).  A side with a
client-bound repeat, or too few repeats, is ``inconclusive`` whatever the numbers say; two sides whose
engine facts differ beyond the compared backend are ``incomparable``
(:mod:`pytest_sskj.acceptance.comparability`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sskj.vocabulary import COMPARISON_METRICS, METRICS

__all__ = [
    "DECIDED",
    "METHOD_VERSION",
    "MIN_REPEATS",
    "OUTCOMES",
    "STATISTIC",
    "MetricDelta",
    "RepeatSample",
    "Verdict",
    "compare",
    "conf_text",
    "fmt_pct",
    "median",
    "repeat_interval",
    "t_quantile",
    "welch_log",
]

METHOD_VERSION = (
    "sskj-verdict/3 (Welch t on log per-repeat statistics; group-sequential looks, Lan-DeMets alpha spending alpha*t^2)"
)
"""Recorded in every verdict; bump whenever the method in ``docs/verdicts.md`` changes."""

MIN_REPEATS = 2
"""Usable repeats a side needs before it can be judged (a variance needs two)."""

OUTCOMES = ("better", "worse", "equivalent", "inconclusive", "incomparable")
DECIDED = frozenset({"better", "worse"})
"""Outcomes that claim a difference (an A/A control must never reach them)."""

DEFAULT_EQUIVALENCE_PCT = 5.0

STATISTIC = "ratio of geometric means of the repeats"
"""What every verdict delta is (the medians beside it are medians of the repeats)."""


def median(values: Sequence[float]) -> float | None:
    """The median of ``values``; ``None`` for an empty sequence."""
    vals = sorted(values)
    n = len(vals)
    if n == 0:
        return None
    mid = n // 2
    return vals[mid] if n % 2 else (vals[mid - 1] + vals[mid]) / 2.0


def conf_text(confidence: float) -> str:
    """``95 %`` / ``99.56 %`` (a sequential look's nominal level shows its decimals)."""
    pct = confidence * 100.0
    return f"{pct:.0f} %" if abs(pct - round(pct)) < 1e-9 else f"{pct:.2f} %"


def fmt_pct(value: float | None, *, digits: int = 2) -> str:
    """``+10.96 %`` / ``−9.91 %`` (true minus sign, as in the users' tables); ``n/a`` for ``None``."""
    if value is None:
        return "n/a"
    sign = "+" if value >= 0 else "−"
    return f"{sign}{abs(value):.{digits}f} %"


# -- Student t quantile (no scipy on a client box) ---------------------------------------------------
def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)`` (continued fraction, Numerical Recipes 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def _t_pdf(t: float, df: float) -> float:
    return math.exp(
        math.lgamma((df + 1.0) / 2.0)
        - math.lgamma(df / 2.0)
        - 0.5 * math.log(df * math.pi)
        - (df + 1.0) / 2.0 * math.log1p(t * t / df)
    )


def t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (``q`` > 0.5) of Student's t with ``df`` degrees of freedom.

    Newton's method on the CDF, safeguarded by the bracket it keeps (a step leaving it bisects, or doubles
    while no upper bound is known): a handful of CDF evaluations instead of bisection's 80 (the comparison
    and the sequential design call it for every look); the same root to ~1e-12 relative."""
    lo, hi = 0.0, math.inf
    x = 2.0
    for _ in range(200):
        f = _t_cdf(x, df) - q
        if f < 0:
            lo = x
        else:
            hi = x
        nx = x - f / _t_pdf(x, df)
        if not lo < nx < hi:
            nx = (lo + hi) / 2.0 if hi < math.inf else 2.0 * x
        if abs(nx - x) <= 1e-13 * max(1.0, abs(nx)):
            return nx
        x = nx
    return x


def welch_log(base: Sequence[float], cand: Sequence[float]) -> tuple[float, float, float] | None:
    """``(d, se, df)`` of the log per-repeat values: mean difference, Welch standard error and
    Welch-Satterthwaite degrees of freedom; ``None`` when a side has fewer than :data:`MIN_REPEATS` positive values."""
    lb = [math.log(v) for v in base if v > 0]
    lc = [math.log(v) for v in cand if v > 0]
    if len(lb) < MIN_REPEATS or len(lc) < MIN_REPEATS:
        return None
    nb, nc = len(lb), len(lc)
    mb, mc = sum(lb) / nb, sum(lc) / nc
    vb = sum((x - mb) ** 2 for x in lb) / (nb - 1)
    vc = sum((x - mc) ** 2 for x in lc) / (nc - 1)
    se2 = vb / nb + vc / nc
    if se2 <= 0.0:
        return mc - mb, 0.0, float(nb + nc - 2)
    df = se2**2 / ((vb / nb) ** 2 / (nb - 1) + (vc / nc) ** 2 / (nc - 1))
    return mc - mb, math.sqrt(se2), df


def repeat_interval(
    base: Sequence[float], cand: Sequence[float], *, confidence: float
) -> tuple[float, float, float] | None:
    """``(delta_pct, ci_low_pct, ci_high_pct)`` of ``cand`` vs ``base`` per-repeat values (Welch on logs).

    ``None`` when a side has fewer than :data:`MIN_REPEATS` positive values.
    """
    w = welch_log(base, cand)
    if w is None:
        return None
    d, se, df = w
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * se if se > 0 else 0.0

    def pct(x: float) -> float:
        return (math.exp(x) - 1.0) * 100.0

    return pct(d), pct(d - half), pct(d + half)


@dataclass(frozen=True)
class RepeatSample:
    """What one repeat contributes: one value per comparison metric, and whether it was client-bound."""

    values: Mapping[str, float | None]
    point_id: str = ""
    client_bound: bool = False

    @classmethod
    def from_row(cls, row: Mapping[str, Any], metrics: Sequence[str] = COMPARISON_METRICS) -> RepeatSample:
        def num(key: str) -> float | None:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

        return cls(
            {m: num(m) for m in metrics},
            str(row.get("point_id") or ""),
            bool(row.get("client_bound")),
        )


@dataclass(frozen=True)
class MetricDelta:
    """One metric of the comparison: medians of repeats, the relative change and its confidence interval."""

    name: str
    """Canonical metric name (``input_throughput``, ``median_ttft_ms``, ``p95_ttft_ms``)."""
    higher_is_better: bool
    baseline: float | None
    """Median over the baseline's repeats (as in the users' tables)."""
    candidate: float | None
    delta_pct: float | None
    """Ratio of the geometric means of the repeats minus one, in percent."""
    ci_low_pct: float | None
    ci_high_pct: float | None
    outcome: str
    n_baseline: int = 0
    n_candidate: int = 0
    t_stat: float | None = None
    """Welch's t of the log difference (``None`` with a zero standard error or too few repeats)."""
    df: float | None = None

    @property
    def label(self) -> str:
        return METRICS[self.name].label if self.name in METRICS else self.name

    @property
    def improvement_ci(self) -> tuple[float, float] | None:
        """The CI of the improvement in percent (sign flipped for lower-is-better metrics)."""
        if self.ci_low_pct is None or self.ci_high_pct is None:
            return None
        if self.higher_is_better:
            return (self.ci_low_pct, self.ci_high_pct)
        return (-self.ci_high_pct, -self.ci_low_pct)

    @property
    def medians_pct(self) -> float | None:
        """The ratio of the medians of the repeats minus one, in percent (the summary table's "vs baseline")."""
        if not self.baseline or self.candidate is None:
            return None
        return (self.candidate / self.baseline - 1.0) * 100.0

    def text(self, confidence: float, *, medians: bool = False) -> str:
        ci = ""
        if self.ci_low_pct is not None and self.ci_high_pct is not None:
            ci = f" ({conf_text(confidence)} CI {fmt_pct(self.ci_low_pct)} … {fmt_pct(self.ci_high_pct)})"
        med = ""
        if medians and self.medians_pct is not None:
            med = (
                f" [geometric means; medians {self.baseline:.4g} -> {self.candidate:.4g}: {fmt_pct(self.medians_pct)}]"
            )
        return f"{fmt_pct(self.delta_pct)} {self.label}{ci}{med}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "unit": METRICS[self.name].unit if self.name in METRICS else None,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta_pct": self.delta_pct,
            "delta_statistic": STATISTIC,
            "medians_pct": self.medians_pct,
            "ci_low_pct": self.ci_low_pct,
            "ci_high_pct": self.ci_high_pct,
            "outcome": self.outcome,
            "higher_is_better": self.higher_is_better,
            "n_baseline": self.n_baseline,
            "n_candidate": self.n_candidate,
            "t": self.t_stat,
            "df": self.df,
        }


@dataclass(frozen=True)
class Verdict:
    """The comparison of one candidate against the baseline."""

    candidate: str
    baseline: str
    margin_pct: float
    confidence: float
    metrics: tuple[MetricDelta, ...]
    outcome: str
    """One of :data:`OUTCOMES`."""
    threshold_pct: float = 0.0
    """What the improvement had to exceed: ``max(margin, noise floor)``."""
    noise_floor_pct: float | None = None
    """The run's A/A difference on the primary metric (absolute, percent), when the run has an A/A control."""
    equivalence_pct: float = DEFAULT_EQUIVALENCE_PCT
    reasons: tuple[str, ...] = ()
    """Why the verdict is inconclusive / incomparable regardless of the numbers."""
    ordering: str = ""
    notes: tuple[str, ...] = field(default=())
    method: str = METHOD_VERSION
    blocked: bool = False
    """Inconclusive for a reason more repeats cannot remove (a client-bound side, incomparable sides)."""
    design: str = ""
    """The sequential design the verdict was judged under (empty: the fixed design)."""
    looks: tuple[Mapping[str, Any], ...] = ()
    """Every interim analysis and its stopping decision (:class:`pytest_sskj.acceptance.sequential.Look`)."""
    plan: str = ""
    """The power planner's line: how many repeats per side would decide a stated difference."""

    @property
    def primary(self) -> MetricDelta:
        return self.metrics[0]

    def headline(self) -> str:
        """``+10.96 % Input TPS (95 % CI …), −9.91 % TTFT P50 (95 % CI …), −9.92 % TTFT P95 (95 % CI …)``:
        each a ratio of geometric means of the repeats (:data:`STATISTIC`)."""
        return ", ".join(m.text(self.confidence, medians=(i == 0)) for i, m in enumerate(self.metrics))

    def stopping(self) -> str:
        """``stopped after repeat 5 of at most 10: Welch t +4.1 (df 7.9) at alpha 0.0049 -> better``."""
        if not self.looks:
            return ""
        last = self.looks[-1]
        n = len(self.looks)
        return f"sequential: {n} look(s); stopped {last.get('text', '')}"

    def _tail(self) -> str:
        bar = f"{self.threshold_pct:g} %"
        if self.noise_floor_pct is not None and self.threshold_pct > self.margin_pct:
            bar += f" (the run's A/A noise floor; margin {self.margin_pct:g} %)"
        p = self.primary
        if self.outcome == "better":
            return f"{self.candidate} beats {self.baseline} on {p.label} by more than {bar}"
        if self.outcome == "worse":
            return f"{self.candidate} does not beat {self.baseline} by {bar}: {p.label} below it"
        if self.outcome == "equivalent":
            return f"equivalent: the CI of {p.label} lies within ±{self.equivalence_pct:g} %"
        if self.outcome == "incomparable":
            return "incomparable: " + "; ".join(self.reasons)
        plan = f"; {self.plan}" if self.plan else ""
        if self.reasons:
            return "inconclusive: " + "; ".join(self.reasons) + plan
        return (
            f"inconclusive: the {conf_text(self.confidence)} CI of {p.label} straddles {bar}; "
            f"add --repeats or --sskj-max-repeats (the unit of replication is the repeat){plan}"
        )

    def message(self) -> str:
        head = f"{self.candidate} vs {self.baseline}: {self.headline()} (deltas: {STATISTIC})"
        notes = "".join(f"; {n}" for n in self.notes)
        stop = f"; {self.stopping()}" if self.looks else ""
        return f"{head} — {self._tail()}{stop}{notes}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "baseline": self.baseline,
            "margin_pct": self.margin_pct,
            "threshold_pct": self.threshold_pct,
            "noise_floor_pct": self.noise_floor_pct,
            "equivalence_pct": self.equivalence_pct,
            "confidence": self.confidence,
            "outcome": self.outcome,
            "method": self.method,
            "ordering": self.ordering,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "statistic": STATISTIC,
            "blocked": self.blocked,
            "sequential": {"design": self.design or "fixed", "looks": [dict(x) for x in self.looks]},
            "plan": self.plan,
            "message": self.message(),
            "metrics": [m.as_dict() for m in self.metrics],
        }


def _outcome(
    higher: bool, ci: tuple[float, float] | None, *, threshold: float, margin: float, equivalence: float
) -> str:
    if ci is None:
        return "inconclusive"
    lo, hi = ci if higher else (-ci[1], -ci[0])
    if lo > threshold:
        return "better"
    if hi < margin:
        return "worse"
    if -equivalence <= lo and hi <= equivalence:
        return "equivalent"
    return "inconclusive"


def _metric(
    name: str, base: Sequence[RepeatSample], cand: Sequence[RepeatSample], conf: float, **bars: float
) -> MetricDelta:
    bv = [v for v in (r.values.get(name) for r in base) if v is not None]
    cv = [v for v in (r.values.get(name) for r in cand) if v is not None]
    higher = METRICS[name].higher_is_better
    iv = repeat_interval(bv, cv, confidence=conf)
    ci = (iv[1], iv[2]) if iv else None
    w = welch_log(bv, cv)
    return MetricDelta(
        name,
        higher,
        median(bv),
        median(cv),
        iv[0] if iv else None,
        ci[0] if ci else None,
        ci[1] if ci else None,
        _outcome(higher, ci, **bars),
        len(bv),
        len(cv),
        (w[0] / w[1]) if w and w[1] > 0 else None,
        w[2] if w else None,
    )


def _side_reasons(primary: MetricDelta, base: Sequence[RepeatSample], cand: Sequence[RepeatSample]) -> list[str]:
    """Why a side cannot be judged: too few usable repeats, or client-bound repeats."""
    reasons: list[str] = []
    for side, reps, n in (("baseline", base, primary.n_baseline), ("candidate", cand, primary.n_candidate)):
        if n < MIN_REPEATS:
            reasons.append(
                f"{side} has {n} usable repeat(s) of {primary.label}, at least {MIN_REPEATS} are needed; "
                f"raise --repeats (3 or more per side)"
            )
        bound = [r.point_id or "?" for r in reps if r.client_bound]
        if bound:
            reasons.append(
                f"{side} measurement(s) client-bound ({', '.join(bound)}): the client, not the server, set them"
            )
    return reasons


def compare(
    baseline: str,
    candidate: str,
    base: Sequence[RepeatSample],
    cand: Sequence[RepeatSample],
    *,
    margin_pct: float = 0.0,
    confidence: float = 0.95,
    noise_floor_pct: float | None = None,
    equivalence_pct: float = DEFAULT_EQUIVALENCE_PCT,
    ordering: str = "",
    incomparable: Sequence[str] = (),
    metrics: Sequence[str] = COMPARISON_METRICS,
) -> Verdict:
    """Compare ``cand`` repeats against ``base`` repeats (see the module docstring for the method)."""
    threshold = max(margin_pct, noise_floor_pct or 0.0)
    bars = {"threshold": threshold, "margin": margin_pct, "equivalence": max(equivalence_pct, margin_pct)}
    deltas = tuple(_metric(m, base, cand, confidence, **bars) for m in metrics)
    primary = deltas[0]
    reasons = _side_reasons(primary, base, cand)
    outcome = primary.outcome
    notes: list[str] = []
    blocked = bool(incomparable) or any(r.client_bound for r in (*base, *cand))
    if incomparable:
        outcome, reasons = "incomparable", list(incomparable)
    elif reasons:
        outcome = "inconclusive"
    elif outcome == "better":
        traded = [m.label for m in deltas[1:] if (m.improvement_ci or (0.0, 0.0))[1] < 0.0]
        if traded:
            outcome = "inconclusive"
            reasons.append(f"{primary.label} is better but {', '.join(traded)} significantly worse (a trade-off)")
    if noise_floor_pct is not None:
        notes.append(f"the run's A/A noise floor on {primary.label} is {noise_floor_pct:.2f} %")
    if ordering:
        notes.append(f"repeats ordered {ordering}")
    return Verdict(
        candidate,
        baseline,
        margin_pct,
        confidence,
        deltas,
        outcome,
        threshold,
        noise_floor_pct,
        bars["equivalence"],
        tuple(reasons),
        ordering,
        tuple(notes),
        blocked=blocked,
    )
