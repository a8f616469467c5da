"""SLO gates: parsed expressions such as ``p95_ttft_ms<3000`` that explain themselves on failure.

The users' S2 SLO is *strict*: TTFT P95 < 3 s and TPOT P95 < 50 ms (``<`` not ``<=``).  Gate names are
the canonical metric names of :mod:`pytest_sskj.vocabulary` (``p95_ttft_ms``); the older SLO spelling
(``ttft_p95_ms``) maps onto exactly one canonical name and is accepted as that name.  Anything else is
refused when the option is parsed: an unknown metric (``ttft_p59_ms``, ``foo_ms``), an empty expression,
an empty gate (a trailing comma), an operator other than ``< <= > >=``, a threshold that is not a finite
number.  A gate on a metric that is undefined for the run (``None``, e.g. TPOT when OSL = 1) is *not
judged* and says so; it never passes vacuously on a 0 that stands for "no samples".
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_sskj.vocabulary import GATEABLE, UnknownMetric, canonical, known_names

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["DEFAULT_SLO", "GateResult", "SloGate", "evaluate_gates", "parse_slo"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NEGATION = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_GATE_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*([<>=!]+)\s*(\S+)\s*$")

DEFAULT_SLO = "p95_ttft_ms<3000,p95_tpot_ms<50"


@dataclass(frozen=True)
class GateResult:
    """The outcome of one gate on one value."""

    gate: SloGate
    value: float | None
    passed: bool | None
    """``None`` when the metric is undefined and the gate was not judged."""

    def sentence(self) -> str:
        g = self.gate
        if self.passed is None:
            return f"{g.metric} not judged (undefined for this run)"
        rel = g.op if self.passed else _NEGATION[g.op]
        return f"{g.metric}={self.value:.2f} {rel} {g.threshold:g}"


@dataclass(frozen=True)
class SloGate:
    """One ``metric OP threshold`` gate; ``metric`` is the canonical name."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"

    def check(self, value: float | None) -> GateResult:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return GateResult(self, None, None)
        return GateResult(self, float(value), _OPS[self.op](float(value), self.threshold))


def _gate(item: str) -> SloGate:
    example = "e.g. p95_ttft_ms<3000"
    m = _GATE_RE.match(item)
    if not m:
        raise ValueError(f"{item!r} is not a gate; write METRIC OP NUMBER with OP one of < <= > >=, {example}")
    name, op, num = m.groups()
    if op not in _OPS:
        raise ValueError(f"{item!r} is not a gate: operator {op!r} is not one of < <= > >= ({example})")
    try:
        metric = canonical(name, allowed=GATEABLE)
    except UnknownMetric as exc:
        raise ValueError(f"{item!r}: {exc}") from None
    try:
        threshold = float(num)
    except ValueError:
        raise ValueError(f"{item!r}: {num!r} is not a number") from None
    if not math.isfinite(threshold):
        raise ValueError(f"{item!r}: the threshold must be a finite number, not {num!r}")
    if threshold < 0 or (threshold == 0 and op == "<"):
        raise ValueError(f"{item!r} can never hold: {metric} is never negative (thresholds are >= 0)")
    return SloGate(metric, op, threshold)


def _check_consistent(gates: Sequence[SloGate]) -> None:
    """A metric is gated at most once from above and once from below, and the two leave room for a value:
    ``p95_ttft_ms<3000,p95_ttft_ms<2000`` (which one holds?) and ``p95_ttft_ms>3000,p95_ttft_ms<2000`` are
    refused."""
    seen: dict[tuple[str, bool], SloGate] = {}
    for g in gates:
        upper = g.op in ("<", "<=")
        other = seen.get((g.metric, upper))
        if other is not None:
            raise ValueError(
                f"gates {other} and {g} both bound {g.metric} from {'above' if upper else 'below'}; keep one"
            )
        seen[(g.metric, upper)] = g
        below, above = seen.get((g.metric, False)), seen.get((g.metric, True))
        if below is not None and above is not None:
            empty = below.threshold > above.threshold or (
                below.threshold == above.threshold and (below.op == ">" or above.op == "<")
            )
            if empty:
                raise ValueError(f"gates {below} and {above} contradict each other: no value of {g.metric} meets both")


def check_agreement_text(text: str) -> None:
    """The part of the agreement-gate grammar that :func:`pytest_sskj.acceptance.agreement.parse_gates` leaves
    open: ASCII numbers, no NaN, each figure gated once."""
    if str(text).strip().lower() in ("none", "off"):
        return
    seen: set[str] = set()
    for part in str(text).split(","):
        metric, sep, value = part.strip().partition(">=")
        name = metric.strip() if sep else "first_token_agreement_frac"
        number = (value if sep else metric).strip()
        if not part.strip():
            raise ValueError(f"{text!r} has an empty gate (a stray comma?)")
        if number and not re.fullmatch(r"[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?", number, re.ASCII):
            raise ValueError(f"{part.strip()!r}: {number!r} is not a fraction 0-1 (ASCII digits)")
        if name in seen:
            raise ValueError(f"{text!r} gates {name} twice; keep one")
        seen.add(name)


def parse_slo(text: str | Sequence[str]) -> tuple[SloGate, ...]:
    """Parse ``"p95_ttft_ms<3000,p95_tpot_ms<50"`` into gates; ``"none"`` gives none.

    Raises ``ValueError`` (the option layer turns it into a usage error) for an empty expression, an
    empty gate (``a<1,``), a bad operator, a bad number or an unknown metric; the message lists the known
    metrics where the name was the problem.
    """
    items = text.split(",") if isinstance(text, str) else [str(t) for t in text]
    if len(items) == 1 and items[0].strip().lower() == "none":
        return ()
    if not any(i.strip() for i in items):
        raise ValueError(
            "the SLO expression is empty; give gates like p95_ttft_ms<3000,p95_tpot_ms<50, or 'none' to disable"
        )
    gates: list[SloGate] = []
    for pos, raw in enumerate(items, 1):
        item = raw.strip()
        if not item:
            raise ValueError(
                f"gate {pos} of {','.join(items)!r} is empty (a stray or trailing comma); "
                f"known metrics: {known_names(GATEABLE)}"
            )
        if item.lower() == "none":
            raise ValueError(f"'none' disables every gate and cannot be combined with gates ({','.join(items)!r})")
        gates.append(_gate(item))
    _check_consistent(gates)
    return tuple(gates)


def evaluate_gates(gates: Sequence[SloGate], metrics: Mapping[str, float | None]) -> list[GateResult]:
    """Check every gate against ``metrics`` (canonical names); a missing metric counts as undefined."""
    return [g.check(metrics.get(g.metric)) for g in gates]


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns:
    the ``slo`` value kind's parser."""
    registry.add_parser("slo", parse_slo)
