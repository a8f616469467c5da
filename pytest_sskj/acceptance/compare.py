"""Candidate vs baseline: the A/B verdict ("FlashInfer >= Marlin") with a bootstrap confidence interval.

Point estimates follow the users' tables: per repeat, input throughput and TTFT P50/P95 as the bench
reports them; across repeats, the median.  The confidence interval comes from a seeded bootstrap over
per-request samples, stratified by repeat: each replicate resamples every repeat's requests with
replacement, recomputes the repeat's TTFT percentiles, scales the repeat's input throughput by the
ratio of its mean E2E latency to the resampled one (Little's law for a closed loop at fixed concurrency
and ISL), and takes the median over repeats again.  The verdict requires the whole interval to clear
the margin: "better" only when the lower bound of the improvement is at least ``margin_pct``, "worse"
only when the upper bound is below it, "inconclusive" otherwise, so noise can neither pass nor fail it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MetricDelta",
    "RepeatSample",
    "Verdict",
    "bootstrap_ratio",
    "compare",
    "fmt_pct",
    "median",
]


def median(values: Sequence[float]) -> float | None:
    """The median of ``values``; ``None`` for an empty sequence."""
    vals = sorted(values)
    n = len(vals)
    if n == 0:
        return None
    mid = n // 2
    return vals[mid] if n % 2 else (vals[mid - 1] + vals[mid]) / 2.0


def fmt_pct(value: float | None, *, digits: int = 2) -> str:
    """``+10.96 %`` / ``−9.91 %`` (true minus sign, as in the users' tables); ``n/a`` for ``None``."""
    if value is None:
        return "n/a"
    sign = "+" if value >= 0 else "−"
    return f"{sign}{abs(value):.{digits}f} %"


@dataclass(frozen=True)
class RepeatSample:
    """What one repeat contributes: its summary metrics and its per-request samples (ms)."""

    input_tps: float | None
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_ms: tuple[float, ...] = ()
    e2e_ms: tuple[float, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any], samples: Mapping[str, Sequence[float]]) -> RepeatSample:
        def num(key: str) -> float | None:
            v = row.get(key)
            return float(v) if isinstance(v, (int, float)) else None

        return cls(
            num("input_throughput"),
            num("median_ttft_ms"),
            num("p95_ttft_ms"),
            tuple(float(x) for x in samples.get("ttft_ms", ())),
            tuple(float(x) for x in samples.get("e2e_latency_ms", ())),
        )


@dataclass(frozen=True)
class MetricDelta:
    """One metric of the comparison: medians, the relative change and its confidence interval."""

    name: str
    """``input TPS``, ``TTFT P50`` or ``TTFT P95``."""
    higher_is_better: bool
    baseline: float | None
    candidate: float | None
    delta_pct: float | None
    """``(candidate / baseline - 1) * 100``."""
    ci_low_pct: float | None
    ci_high_pct: float | None
    outcome: str
    """``better``, ``worse`` or ``inconclusive`` (judged on the improvement vs the margin)."""

    @property
    def improvement_ci(self) -> tuple[float, float] | None:
        """The CI of the improvement in percent (sign flipped for lower-is-better metrics)."""
        if self.ci_low_pct is None or self.ci_high_pct is None:
            return None
        if self.higher_is_better:
            return (self.ci_low_pct, self.ci_high_pct)
        return (-self.ci_high_pct, -self.ci_low_pct)

    def text(self, confidence: float) -> str:
        ci = ""
        if self.ci_low_pct is not None and self.ci_high_pct is not None:
            ci = f" ({confidence * 100:g} % CI {fmt_pct(self.ci_low_pct)} … {fmt_pct(self.ci_high_pct)})"
        return f"{fmt_pct(self.delta_pct)} {self.name}{ci}"


@dataclass(frozen=True)
class Verdict:
    """The comparison of one candidate against the baseline."""

    candidate: str
    baseline: str
    margin_pct: float
    confidence: float
    metrics: tuple[MetricDelta, ...]
    outcome: str
    """``better`` when every metric is better by the margin, ``worse`` when any is worse, else ``inconclusive``."""
    n_boot: int
    seed: int
    notes: tuple[str, ...] = field(default=())

    def headline(self) -> str:
        """``+10.96 % input TPS (95 % CI …), −9.91 % TTFT P50 (95 % CI …), −9.92 % TTFT P95 (95 % CI …)``."""
        return ", ".join(m.text(self.confidence) for m in self.metrics)

    def message(self) -> str:
        margin = f"by at least {self.margin_pct:g} %" if self.margin_pct else "(margin 0 %)"
        head = f"{self.candidate} vs {self.baseline}: {self.headline()}"
        if self.outcome == "better":
            tail = f"{self.candidate} beats {self.baseline} {margin} on every metric"
        elif self.outcome == "worse":
            bad = [m.name for m in self.metrics if m.outcome == "worse"]
            tail = f"{self.candidate} does not beat {self.baseline} {margin}: {', '.join(bad)} outside the margin"
        else:
            unsure = [m.name for m in self.metrics if m.outcome == "inconclusive"]
            tail = (
                f"inconclusive: the {self.confidence * 100:g} % CI of {', '.join(unsure)} straddles the margin "
                f"{self.margin_pct:g} %; add --repeats or --requests to separate signal from noise"
            )
        notes = "".join(f"; {n}" for n in self.notes)
        return f"{head} — {tail}{notes}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "baseline": self.baseline,
            "margin_pct": self.margin_pct,
            "confidence": self.confidence,
            "outcome": self.outcome,
            "n_boot": self.n_boot,
            "seed": self.seed,
            "message": self.message(),
            "metrics": [
                {
                    "name": m.name,
                    "baseline": m.baseline,
                    "candidate": m.candidate,
                    "delta_pct": m.delta_pct,
                    "ci_low_pct": m.ci_low_pct,
                    "ci_high_pct": m.ci_high_pct,
                    "outcome": m.outcome,
                    "higher_is_better": m.higher_is_better,
                }
                for m in self.metrics
            ],
        }


def _median_of(values: Sequence[float | None]) -> float | None:
    return median([v for v in values if v is not None])


def _ratio_pct(cand: float | None, base: float | None) -> float | None:
    if cand is None or base is None or base == 0:
        return None
    return (cand / base - 1.0) * 100.0


def _boot_stat(repeats: Sequence[RepeatSample], metric: str, n_boot: int, rng: Any) -> Any | None:
    """``n_boot`` bootstrap replicates of the median-over-repeats of ``metric``; ``None`` without samples."""
    import numpy as np

    per_repeat = []
    for rep in repeats:
        if metric == "input_tps":
            if rep.input_tps is None or len(rep.e2e_ms) < 2:
                continue
            e2e = np.asarray(rep.e2e_ms, dtype=float)
            idx = rng.integers(0, len(e2e), size=(n_boot, len(e2e)))
            mean_star = e2e[idx].mean(axis=1)
            per_repeat.append(rep.input_tps * e2e.mean() / mean_star)
        else:
            if len(rep.ttft_ms) < 2:
                continue
            ttft = np.asarray(rep.ttft_ms, dtype=float)
            idx = rng.integers(0, len(ttft), size=(n_boot, len(ttft)))
            q = 50.0 if metric == "ttft_p50" else 95.0
            per_repeat.append(np.percentile(ttft[idx], q, axis=1))
    if not per_repeat:
        return None
    return np.median(np.stack(per_repeat, axis=0), axis=0)


def bootstrap_ratio(
    base: Sequence[RepeatSample],
    cand: Sequence[RepeatSample],
    metric: str,
    *,
    n_boot: int,
    confidence: float,
    seed: int,
) -> tuple[float, float] | None:
    """The ``confidence`` CI (percentile method) of ``(cand / base - 1) * 100`` for ``metric``.

    ``metric`` is ``input_tps``, ``ttft_p50`` or ``ttft_p95``.  ``None`` when either side has no samples.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    b = _boot_stat(base, metric, n_boot, rng)
    c = _boot_stat(cand, metric, n_boot, rng)
    if b is None or c is None:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (c / b - 1.0) * 100.0
    ratio = ratio[np.isfinite(ratio)]
    if ratio.size == 0:
        return None
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratio, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _outcome(higher_is_better: bool, ci: tuple[float, float] | None, delta: float | None, margin_pct: float) -> str:
    if ci is None:
        if delta is None:
            return "inconclusive"
        improvement = delta if higher_is_better else -delta
        return "better" if improvement >= margin_pct else "worse"
    lo, hi = ci if higher_is_better else (-ci[1], -ci[0])
    if lo >= margin_pct:
        return "better"
    if hi < margin_pct:
        return "worse"
    return "inconclusive"


def compare(
    baseline: str,
    candidate: str,
    base: Sequence[RepeatSample],
    cand: Sequence[RepeatSample],
    *,
    margin_pct: float = 0.0,
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int = 42,
) -> Verdict:
    """Compare ``cand`` repeats against ``base`` repeats on input TPS and TTFT P50/P95."""
    specs = (
        ("input TPS", "input_tps", True, "input_tps"),
        ("TTFT P50", "ttft_p50_ms", False, "ttft_p50"),
        ("TTFT P95", "ttft_p95_ms", False, "ttft_p95"),
    )
    metrics: list[MetricDelta] = []
    notes: list[str] = []
    for i, (name, attr, higher, boot_key) in enumerate(specs):
        b = _median_of([getattr(r, attr) for r in base])
        c = _median_of([getattr(r, attr) for r in cand])
        delta = _ratio_pct(c, b)
        ci = bootstrap_ratio(base, cand, boot_key, n_boot=n_boot, confidence=confidence, seed=seed + i)
        if ci is None and delta is not None:
            notes.append(f"{name}: no per-request samples, judged on the medians without a CI")
        outcome = _outcome(higher, ci, delta, margin_pct)
        metrics.append(MetricDelta(name, higher, b, c, delta, ci[0] if ci else None, ci[1] if ci else None, outcome))
    outcomes = {m.outcome for m in metrics}
    overall = "worse" if "worse" in outcomes else ("inconclusive" if "inconclusive" in outcomes else "better")
    return Verdict(candidate, baseline, margin_pct, confidence, tuple(metrics), overall, n_boot, seed, tuple(notes))
