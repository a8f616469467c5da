"""The accuracy A/B: a non-inferiority test of the candidate's exact match against the baseline's, paired question
by question, with a stated margin (``--sskj-accuracy-min delta>=-1pt``; docs/accuracy.md).

Both sides answer the same fixed questions, so the outcomes are pairs: ``both`` right, ``baseline_only`` right,
``candidate_only`` right, ``neither``.  The estimate is ``delta = (candidate_only - baseline_only) / n`` (in
percentage points), its 95 % interval Agresti & Min's (2005) for matched proportions: 0.5 added to each of the four
cells, then the Wald interval (coverage close to nominal down to small ``n``, unlike the plain Wald interval, which
collapses to a point when no pair differs).  The gate passes -- ``non-inferior`` -- only when the interval's lower
bound clears ``-margin``; when its upper bound is below ``-margin`` the candidate is ``worse``; anything between is
``inconclusive`` and says how many questions would decide the margin at the observed rates (none can when the
estimate itself is below ``-margin``).  Both failing outcomes fail the test.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sskj.accuracy.score import Z95, Graded

METHOD_VERSION = "sskj-accuracy/1 (paired exact match; Agresti-Min interval for matched proportions)"
_MARGIN = re.compile(r"^\s*(?:delta\s*>=\s*)?-\s*(?P<n>[0-9]+(?:\.[0-9]+)?)\s*pt\s*$")
ACCEPTED = "delta>=-Npt (N percentage points the candidate may lose, 0 <= N < 100: delta>=-1pt, delta>=-2.5pt), or none"


class MarginError(ValueError):
    """A margin that cannot be used; the message says what, what is accepted and a hint."""


@dataclass(frozen=True)
class Margin:
    """How many percentage points of exact match the candidate may lose."""

    points: float

    def __str__(self) -> str:
        return f"delta>=-{self.points:g}pt"


def parse_margin(text: str) -> Margin | None:
    """``delta>=-1pt`` (or ``-1pt``) -> ``Margin(1.0)``; ``none`` -> ``None``; else a :class:`MarginError`."""
    if text.strip().lower() == "none":
        return None
    m = _MARGIN.match(text)
    if m is None:
        hint = "the unit is percentage points ('pt') and the bound is a loss: delta>=-1pt"
        if re.search(r"[0-9]\s*%", text):
            hint = "write percentage points as 'pt' (1pt = one question in a hundred), not '%'"
        elif re.match(r"^\s*(?:delta\s*>=\s*)?\+?\s*[0-9.]+\s*pt\s*$", text):
            hint = "a margin bounds a loss: delta>=-1pt (a gain cannot be required here)"
        raise MarginError(f"accuracy margin {text!r} is not understood; accepted: {ACCEPTED}; hint: {hint}")
    points = float(m.group("n"))
    if not 0 <= points < 100:
        raise MarginError(f"accuracy margin {text!r}: {points:g} points; accepted: {ACCEPTED}; hint: try delta>=-1pt")
    return Margin(points)


@dataclass(frozen=True)
class Pairs:
    """The 2 x 2 table of paired outcomes over the same questions."""

    both: int
    baseline_only: int
    candidate_only: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.baseline_only + self.candidate_only + self.neither


def pair(baseline: Sequence[Graded], candidate: Sequence[Graded]) -> Pairs:
    """Pair two sides' graded answers by question index; both must have answered exactly the same questions."""
    b = {g.index: g.correct for g in baseline}
    c = {g.index: g.correct for g in candidate}
    if b.keys() != c.keys() or len(b) != len(baseline) or len(c) != len(candidate):
        only = sorted(b.keys() ^ c.keys())[:5]
        raise ValueError(f"the two sides did not answer the same questions (e.g. record(s) {only}): not comparable")
    both = sum(1 for i, right in b.items() if right and c[i])
    baseline_only = sum(1 for i, right in b.items() if right and not c[i])
    candidate_only = sum(1 for i, right in b.items() if not right and c[i])
    return Pairs(both, baseline_only, candidate_only, len(b) - both - baseline_only - candidate_only)


def _am_interval(n: float, b: float, c: float, z: float) -> tuple[float, float]:
    """Agresti-Min interval of ``(c - b) / n`` (fractions): 0.5 added to each of the four cells, then Wald."""
    n1, b1, c1 = n + 2, b + 0.5, c + 0.5
    d = (c1 - b1) / n1
    half = z * math.sqrt(max(((b1 + c1) - (c1 - b1) ** 2 / n1) / n1**2, 0.0))
    return d - half, d + half


def delta_interval(p: Pairs, z: float = Z95) -> tuple[float, float, float] | None:
    """``(delta, low, high)`` in percentage points (Agresti-Min); ``None`` with no pair."""
    if p.n == 0:
        return None
    lo, hi = _am_interval(p.n, p.baseline_only, p.candidate_only, z)
    return 100 * (p.candidate_only - p.baseline_only) / p.n, 100 * lo, 100 * hi


MAX_QUESTIONS = 10**7


def questions_needed(p: Pairs, margin: Margin, z: float = Z95) -> int | None:
    """The fewest questions whose interval would clear ``-margin`` if the observed rates held (the table scaled up);
    ``None`` when no number would (the estimate itself is not above ``-margin``)."""
    if p.n == 0 or (p.candidate_only - p.baseline_only) / p.n <= -margin.points / 100:
        return None

    def clears(n: int) -> bool:
        k = n / p.n
        return _am_interval(n, p.baseline_only * k, p.candidate_only * k, z)[0] >= -margin.points / 100

    lo, hi = p.n, p.n + 1
    while not clears(hi):
        lo, hi = hi, hi * 2
        if hi > MAX_QUESTIONS:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if clears(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class AccuracyVerdict:
    """The gate's outcome (``non-inferior``, ``worse``, ``inconclusive``), its figures and a message."""

    outcome: str
    pairs: Pairs
    margin: Margin
    delta_pt: float | None
    ci95_pt: tuple[float, float] | None
    needed: int | None
    message: str

    @property
    def passed(self) -> bool:
        return self.outcome == "non-inferior"


def judge(baseline: Sequence[Graded], candidate: Sequence[Graded], margin: Margin) -> AccuracyVerdict:
    """Non-inferiority of ``candidate`` to ``baseline`` within ``margin``, over the same questions."""
    p = pair(baseline, candidate)
    est = delta_interval(p)
    table = (
        f"{p.both} both right, {p.baseline_only} baseline only, {p.candidate_only} candidate only, {p.neither} neither"
    )
    if est is None:
        return AccuracyVerdict("inconclusive", p, margin, None, None, None, f"no questions answered ({margin})")
    d, lo, hi = est
    head = f"exact match delta {d:+.1f} pt (95 % CI {lo:+.1f} .. {hi:+.1f} pt) over {p.n} paired questions ({table})"
    if lo >= -margin.points:
        return AccuracyVerdict("non-inferior", p, margin, d, (lo, hi), None, f"{head}: non-inferior within {margin}")
    if hi < -margin.points:
        return AccuracyVerdict("worse", p, margin, d, (lo, hi), None, f"{head}: worse than {margin} allows")
    need = questions_needed(p, margin)
    more = (
        f"about {need} questions would decide {margin} at these rates"
        if need is not None
        else f"the estimate itself is below {margin}: more questions would not make it pass"
    )
    return AccuracyVerdict("inconclusive", p, margin, d, (lo, hi), need, f"{head}: inconclusive for {margin}; {more}")
