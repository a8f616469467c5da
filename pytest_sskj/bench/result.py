"""Results of a benchmark point: one repeat (:class:`BenchResult`) and R repeats (:class:`RepeatsResult`).

A :class:`BenchResult` carries the run-level metrics (names and definitions in
:mod:`pytest_sskj.bench.metrics`), the per-request records, each failure's reason, the client-saturation
verdict with its evidence, and ``.ok`` (every measured request passed the strict oracle).
:class:`RepeatsResult` holds the per-repeat results and, for every numeric metric, the median across
repeats with its spread (min, max and ``(max - min) / median`` in percent).

The seam the acceptance runner builds against is declared here: :class:`BenchOutcome` (everything a
caller reads of a repeat's result) and :class:`BenchFn` (the signature of ``run_bench``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_sskj.bench.metrics import e2e_ms, itl_samples_ms, tpot_ms, ttft_ms
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.workload import Workload

if TYPE_CHECKING:
    from pytest_sskj.bench.client import BenchTimeouts
    from pytest_sskj.engines.base import CacheReset

__all__ = ["BenchFn", "BenchOutcome", "BenchResult", "MetricValue", "RepeatsResult"]

MetricValue = float | int | str | None


class BenchOutcome(Protocol):
    """What callers read of one repeat's result (:class:`BenchResult` implements it)."""

    @property
    def metrics(self) -> Mapping[str, MetricValue]:
        """Run-level metrics by their ``pytest_sskj.vocabulary`` names (``None`` where undefined)."""
        ...

    @property
    def failures(self) -> list[str]:
        """``"request #i: reason"`` for every measured request that failed the strict oracle."""
        ...

    @property
    def ok(self) -> bool:
        """Every measured request passed the strict oracle."""
        ...

    @property
    def client_bound(self) -> bool:
        """The client, not the server, limited the measurement (evidence in ``client_evidence``)."""
        ...

    @property
    def stalled(self) -> str | None:
        """Why the run stopped early because the server hung, else ``None``."""
        ...

    def samples(self, name: str) -> list[float]:
        """Per-request samples in ms of ``ttft``, ``tpot``, ``e2e_latency`` (or pooled ``itl``)."""
        ...


class BenchFn(Protocol):
    """The bench entry point (``pytest_sskj.bench.run_bench``, the ``run_bench`` fixture)."""

    def __call__(
        self,
        urls: Sequence[str],
        workload: Workload,
        out_dir: Path,
        *,
        repeat: int = 0,
        label: str = "",
        progress: Callable[[int, int], None] | None = None,
        timeouts: BenchTimeouts | None = None,
        cache_reset: Sequence[CacheReset] | None = None,
        warmed: Sequence[RequestRecord] | None = None,
    ) -> BenchOutcome:
        """``warmed``: the repeat's warmup already sent (``run_warmup``'s records, or ``[]`` on a server an
        earlier measured phase warmed): the bench records it and sends none."""
        ...


@dataclass
class BenchResult:
    """One repeat of one serving point."""

    workload: Workload
    repeat: int
    label: str
    urls: list[str]
    out_dir: Path
    metrics: dict[str, MetricValue]
    records: list[RequestRecord]
    """Measured requests, in plan order."""
    warmup_records: list[RequestRecord] = field(default_factory=list)
    client_bound: bool = False
    client_evidence: dict[str, Any] = field(default_factory=dict)
    cache_flush: dict[str, str] = field(default_factory=dict)
    """Per URL: what ``/flush_cache`` did (``flushed``, ``unsupported (HTTP 404)``, ``skipped``, ...)."""
    stalled: str | None = None
    """Why the run stopped early because the server hung (a request stalled or passed its deadline)."""

    @property
    def failures(self) -> list[str]:
        """``"request #i: reason"`` for every measured request that failed the oracle."""
        return [f"request #{r.index}: {r.failure}" for r in self.records if r.failure is not None]

    @property
    def completed(self) -> int:
        return sum(1 for r in self.records if r.ok)

    @property
    def failed(self) -> int:
        return len(self.records) - self.completed

    @property
    def ok(self) -> bool:
        """Every measured request passed the strict oracle (the "40/40")."""
        return bool(self.records) and self.failed == 0

    def samples(self, name: str) -> list[float]:
        """Per-request samples in ms of ``ttft``, ``tpot``, ``e2e_latency`` (or pooled ``itl``), successes only."""
        ok = [r for r in self.records if r.ok]
        if name == "itl":
            return [s for r in ok for s in itl_samples_ms(r)]
        fn = {"ttft": ttft_ms, "tpot": tpot_ms, "e2e_latency": e2e_ms, "e2e": e2e_ms}.get(name)
        if fn is None:
            raise ValueError(f"unknown sample name {name!r}: choose ttft, tpot, itl or e2e_latency")
        return [v for v in map(fn, ok) if v is not None]

    def summary(self) -> str:
        """One line, e.g. ``isl512-osl16-c8 r0: 40/40 OK, TTFT p95 61.2 ms, TPOT p95 9.8 ms``."""

        def f(key: str) -> str:
            v = self.metrics.get(key)
            return f"{v:.1f} ms" if isinstance(v, float) else "n/a"

        bound = ", CLIENT-BOUND" if self.client_bound else ""
        return (
            f"{self.label or self.workload.label} r{self.repeat}: {self.completed}/{len(self.records)} OK, "
            f"TTFT p95 {f('p95_ttft_ms')}, TPOT p95 {f('p95_tpot_ms')}{bound}"
        )

    def to_row(self) -> dict[str, Any]:
        """The result row fields this subsystem knows (see docs/CONTRACTS.md) plus every metric."""
        w = self.workload
        row: dict[str, Any] = {
            "label": self.label,
            "endpoint": w.endpoint,
            "concurrency": w.concurrency,
            "repeat": self.repeat,
            "isl": w.isl,
            "osl": w.osl,
            "requests": w.requests,
            "status": "passed" if self.ok else "failed",
            "reasons": self.failures,
            "client_bound": self.client_bound,
        }
        for k, v in self.metrics.items():
            if k not in row:
                row[k] = v
        return row


@dataclass
class RepeatsResult:
    """R repeats of one point: per-repeat results, and the median across repeats with its spread."""

    results: list[BenchResult]

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def client_bound(self) -> bool:
        return any(r.client_bound for r in self.results)

    @property
    def failures(self) -> list[str]:
        return [f"repeat {r.repeat} {f}" for r in self.results for f in r.failures]

    def _values(self, key: str) -> list[float]:
        vals: Sequence[MetricValue] = [r.metrics.get(key) for r in self.results]
        return [float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)]

    @property
    def median(self) -> dict[str, float | None]:
        """Median across repeats of every numeric metric (None where no repeat defined it)."""
        keys = [k for k, v in self.results[0].metrics.items() if not isinstance(v, str)] if self.results else []
        out: dict[str, float | None] = {}
        for k in keys:
            vals = self._values(k)
            out[k] = statistics.median(vals) if vals else None
        return out

    @property
    def spread(self) -> dict[str, dict[str, float | None]]:
        """Per numeric metric: ``min``, ``max`` and ``spread_pct = (max - min) / median * 100``."""
        out: dict[str, dict[str, float | None]] = {}
        for k, med in self.median.items():
            vals = self._values(k)
            if not vals or med is None:
                continue
            lo, hi = min(vals), max(vals)
            out[k] = {"min": lo, "max": hi, "spread_pct": (hi - lo) / med * 100.0 if med else None}
        return out
