"""SLO gates: parsed expressions such as ``ttft_p95_ms<3000`` that explain themselves on failure.

The users' S2 SLO is *strict*: TTFT P95 < 3 s and TPOT P95 < 50 ms (``<`` not ``<=``).  A gate on a
metric that is undefined for the run (``None``, e.g. TPOT when OSL = 1) is *not judged* and says so;
it never passes vacuously on a 0 that stands for "no samples".
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["DEFAULT_SLO", "GateResult", "SloGate", "evaluate_gates", "parse_slo"]

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_NEGATION = {"<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_GATE_RE = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(<=|>=|<|>)\s*([0-9.eE+-]+)\s*$")

DEFAULT_SLO = "ttft_p95_ms<3000,tpot_p95_ms<50"


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
    """One ``metric OP threshold`` gate."""

    metric: str
    op: str
    threshold: float

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"

    def check(self, value: float | None) -> GateResult:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return GateResult(self, None, None)
        return GateResult(self, float(value), _OPS[self.op](float(value), self.threshold))


def parse_slo(text: str | Sequence[str]) -> tuple[SloGate, ...]:
    """Parse ``"ttft_p95_ms<3000,tpot_p95_ms<50"`` into gates; ``""`` or ``"none"`` gives none."""
    items = text.split(",") if isinstance(text, str) else list(text)
    gates: list[SloGate] = []
    for raw in items:
        item = str(raw).strip()
        if not item or item.lower() == "none":
            continue
        m = _GATE_RE.match(item)
        if not m:
            raise ValueError(
                f"{item!r} is not a gate; write METRIC OP NUMBER with OP one of < <= > >=, e.g. ttft_p95_ms<3000"
            )
        try:
            threshold = float(m.group(3))
        except ValueError:
            raise ValueError(f"{item!r}: {m.group(3)!r} is not a number") from None
        gates.append(SloGate(m.group(1), m.group(2), threshold))
    return tuple(gates)


def evaluate_gates(gates: Sequence[SloGate], metrics: Mapping[str, float | None]) -> list[GateResult]:
    """Check every gate against ``metrics``; a metric missing from the mapping counts as undefined."""
    return [g.check(metrics.get(g.metric)) for g in gates]
