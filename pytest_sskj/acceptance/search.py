"""Adaptive concurrency search as a pure algorithm over a ``measure(c) -> metrics`` callable.

The users' two modes (``run_adaptive_concurrency*.sh``):

* ``double``: C = 1, 2, 4, ... while the SLO holds; stop at the first SLO miss, or at saturation
  (doubling C raised throughput by less than ``saturation_gain_pct``), or at ``max_c``.
* ``add16``: C = 16, 32, 48, ... while the SLO holds; at the first miss, step back to the last
  concurrency that met it.  If C = 16 already misses, step back by halving (8, 4, 2, 1).

The answer is the highest measured concurrency that met the SLO (``None`` if none did).  Every step is
handed to ``on_step`` as soon as it is measured (the caller writes it to disk), and steps measured by
an interrupted run can be passed back in ``known`` so a resumed search does not repeat them.  A
client-bound step (``client_bound`` in its metrics) is an invalid measurement: it is recorded and
shown, but it is never the answer, never an SLO miss and never the reference of the saturation test.  SLO
gates name the bench's canonical metrics (``p95_ttft_ms``, :mod:`pytest_sskj.vocabulary`); TPOT is
undefined, hence not judged, when OSL = 1 (:func:`slo_view`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sskj.slo import GateResult, SloGate, evaluate_gates

__all__ = ["MODES", "SearchResult", "Step", "first_concurrency", "judge", "search", "slo_view"]

MODES = ("double", "add16")


def slo_view(metrics: Mapping[str, Any], *, osl: int) -> dict[str, float | None]:
    """The numeric metrics of a row under their canonical names (:mod:`pytest_sskj.vocabulary`).

    With ``osl == 1`` every TPOT/ITL value is ``None``: a single output token has no inter-token time, and
    a 0 standing for "no samples" must never pass a ``p95_tpot_ms<50`` gate.
    """
    out: dict[str, float | None] = {}
    for key, value in metrics.items():
        out[key] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if osl <= 1:
        for key in list(out):
            if "tpot" in key or "itl" in key:
                out[key] = None
    return out


def judge(gates: Sequence[SloGate], metrics: Mapping[str, Any], *, osl: int) -> tuple[bool, list[GateResult]]:
    """Whether ``metrics`` meet every gate (undefined metrics are not judged) and the per-gate results."""
    results = evaluate_gates(gates, slo_view(metrics, osl=osl))
    return all(r.passed is not False for r in results), results


@dataclass(frozen=True)
class Step:
    """One measured concurrency of a search."""

    concurrency: int
    metrics: Mapping[str, Any]
    slo_ok: bool
    reasons: tuple[str, ...]
    """Gate sentences, and why the step failed when it did (failed requests, crash)."""
    throughput: float | None
    resumed: bool = False
    client_bound: bool = False
    """An invalid measurement (the client limited it): never the answer, never a saturation reference."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "slo_ok": self.slo_ok,
            "client_bound": self.client_bound,
            "reasons": list(self.reasons),
            "throughput": self.throughput,
            "resumed": self.resumed,
            "metrics": dict(self.metrics),
        }


@dataclass(frozen=True)
class SearchResult:
    """The outcome of one search."""

    mode: str
    best: int | None
    steps: tuple[Step, ...]
    stop_reason: str
    floor: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> bool:
        """Met the floor (any SLO-meeting concurrency when no floor is given)."""
        if self.best is None:
            return False
        return self.floor is None or self.best >= self.floor

    def message(self) -> str:
        trail = ", ".join(
            f"C={s.concurrency} {'client-bound' if s.client_bound else 'ok' if s.slo_ok else 'MISS'}"
            for s in self.steps
        )
        best = f"C={self.best}" if self.best is not None else "none"
        floor = f" (floor C={self.floor}: {'met' if self.passed else 'NOT met'})" if self.floor is not None else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return f"{self.mode}: {self.answer_text} = {best}{floor}; {self.stop_reason}; steps: {trail}{notes}"

    @property
    def answer(self) -> str:
        """What :attr:`best` is: ``saturation`` (throughput stopped growing; the SLO was still met), ``slo_limit``
        (the next step missed the SLO) or ``max`` (the search's maximum was reached)."""
        if self.stop_reason.startswith("saturated"):
            return "saturation"
        if self.stop_reason.startswith("SLO missed"):
            return "slo_limit"
        return "max"

    @property
    def answer_text(self) -> str:
        return {
            "saturation": "saturation knee (throughput stopped growing; the SLO was still met)",
            "slo_limit": "highest concurrency meeting the SLO",
            "max": "highest concurrency meeting the SLO up to the search's maximum",
        }[self.answer]

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "best": self.best,
            "answer": self.answer,
            "floor": self.floor,
            "passed": self.passed,
            "stop_reason": self.stop_reason,
            "message": self.message(),
            "steps": [s.as_dict() for s in self.steps],
        }


def _throughput(metrics: Mapping[str, Any]) -> float | None:
    for key in ("total_throughput", "request_throughput", "input_throughput"):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def search(
    mode: str,
    measure: Callable[[int], Mapping[str, Any]],
    gates: Sequence[SloGate],
    *,
    osl: int,
    max_c: int,
    floor: int | None = None,
    saturation_gain_pct: float = 10.0,
    known: Mapping[int, Mapping[str, Any]] | None = None,
    on_step: Callable[[Step], None] | None = None,
) -> SearchResult:
    """Run the ``mode`` search; ``measure(c)`` returns bench metrics (an ``ok`` key False marks a broken step)."""
    if mode not in MODES:
        raise ValueError(f"unknown search mode {mode!r}; use one of {', '.join(MODES)}")
    if max_c < 1:
        raise ValueError(f"max concurrency must be >= 1, got {max_c}")
    cache = dict(known or {})
    steps: list[Step] = []

    def step(c: int) -> Step:
        resumed = c in cache
        metrics = dict(cache[c]) if resumed else dict(measure(c))
        ok, results = judge(gates, metrics, osl=osl)
        reasons = [r.sentence() for r in results]
        if metrics.get("ok") is False:
            ok = False
            reasons.insert(0, str(metrics.get("error") or "requests failed the strict oracle"))
        bound = bool(metrics.get("client_bound"))
        if bound:
            ok = False
            reasons.insert(0, "client-bound: an invalid measurement, not an answer")
        s = Step(c, metrics, ok, tuple(reasons), _throughput(metrics), resumed, bound)
        steps.append(s)
        if on_step is not None and not resumed:
            on_step(s)
        return s

    walk = _double if mode == "double" else _add16
    best, stop = walk(step, max_c, saturation_gain_pct)
    return SearchResult(mode, best, tuple(steps), stop, floor)


def first_concurrency(mode: str, max_c: int) -> int:
    """The concurrency a fresh ``mode`` search measures first (its server can be started before it runs)."""
    return 1 if mode == "double" else min(16, max_c)


def _double(step: Callable[[int], Step], max_c: int, gain_pct: float) -> tuple[int | None, str]:
    """C = 1, 2, 4, ... until the SLO is missed, throughput gains less than ``gain_pct`` or ``max_c``."""
    best: int | None = None
    c, prev_tp = first_concurrency("double", max_c), None
    while c <= max_c:
        s = step(c)
        if s.client_bound:  # invalid: neither an answer nor a miss; measure the next concurrency
            c *= 2
            continue
        if not s.slo_ok:
            return best, f"SLO missed at C={c} ({'; '.join(s.reasons)})"
        best = c
        if prev_tp is not None and s.throughput is not None and s.throughput < prev_tp * (1 + gain_pct / 100.0):
            gain = (s.throughput / prev_tp - 1) * 100 if prev_tp else 0.0
            return best, f"saturated at C={c}: doubling C raised throughput {gain:+.1f} % (< {gain_pct:g} %)"
        prev_tp = s.throughput
        c *= 2
    return best, f"reached the maximum C={max_c} (--sskj-search-max)"


def _add16(step: Callable[[int], Step], max_c: int, _gain_pct: float) -> tuple[int | None, str]:
    """C = 16, 32, ... until the first miss; with no success yet, step back by halving."""
    best: int | None = None
    c = first_concurrency("add16", max_c)
    while c <= max_c:
        s = step(c)
        if s.slo_ok or s.client_bound:
            best = c if s.slo_ok else best
            c += 16
            continue
        if best is None:
            back = c // 2
            while back >= 1:
                if step(back).slo_ok:
                    best = back
                    break
                back //= 2
        target = f"stepped back to C={best}" if best is not None else "no concurrency met the SLO"
        return best, f"SLO missed at C={c} ({'; '.join(s.reasons)}); {target}"
    return best, f"reached the maximum C={max_c} (--sskj-search-max)"


def highest_met(rows: Sequence[Mapping[str, Any]]) -> int | None:
    """The highest concurrency among passed, not client-bound ``rows`` (matrix points) whose every SLO gate was
    met in every repeat; ``None`` when none did (what ``export`` calls the highest concurrency meeting the SLO)."""
    by_c: dict[int, list[bool]] = {}
    for r in rows:
        met = r.get("slo_met")
        if r.get("status") != "passed" or r.get("client_bound") or not isinstance(met, Mapping) or not met:
            continue
        c = r.get("concurrency")
        if isinstance(c, int):
            by_c.setdefault(c, []).append(all(v is not False for v in met.values()))
    ok = [c for c, v in by_c.items() if all(v)]
    return max(ok) if ok else None
