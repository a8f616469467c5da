"""Metric definitions (version ``METRICS_VERSION``), as pure functions over request records.

All times are ``time.perf_counter()`` seconds in the records and milliseconds in the results.  Only
requests that passed the strict oracle (:mod:`pytest_sskj.bench.oracle`) and are not warmup enter the
latency distributions and the token totals; failed ones are counted in ``failed`` with their reasons.

Per request ``i``:

- ``TTFT_i = t_first - t_send``: ``t_send`` is taken just before the request is written (after the
  concurrency slot was acquired), ``t_first`` when the first network read carrying a content token
  arrived.  A frame with no content token (role-only, usage-only, empty text) does not stop the clock.
  "Arrived" is the kernel's receive time of the read (``SO_TIMESTAMPNS``, plain ``http://`` on Linux,
  moved onto the ``perf_counter`` clock), so the client's own event-loop backlog is not in the figure;
  elsewhere (``https://``, other platforms) the time the transport handed the read up.  The read
  times below (``t_k``; ``t_end`` at ``[DONE]``) are stamped the same way.
- ``E2E_i = t_end - t_send``: ``t_end`` is when the stream ended (``[DONE]`` or connection close).
- ``n_i`` = the server's ``completion_tokens`` (the oracle requires it).
- ``TPOT_i = (E2E_i - TTFT_i) / (n_i - 1)``, excluding the first token; undefined (None) when ``n_i == 1``.
- ITL samples: for each content read ``k`` after the first, the gap ``t_k - t_{k-1}`` between content
  reads is divided evenly over the ``c_k`` tokens of read ``k`` and contributes ``c_k`` samples of
  ``gap / c_k`` (per-token ITL).  Tokens of the first content read contribute no sample.  ``c_k`` is exact
  on ``/generate`` (from the server's cumulative count); on the OpenAI endpoints each frame with text is
  one token, so when a server packs several tokens into a frame the ITL is per frame there.
  Samples are pooled over all successful requests.

Per run (``duration`` = first measured send -> last measured end, seconds):

- ``completed``/``failed``: measured requests that passed / failed the oracle; ``requests`` = both.
- ``total_input_tokens`` = sum of the server's ``prompt_tokens`` (the sent ISL where not reported);
  ``total_output_tokens`` = sum of ``n_i``; both over completed requests.
- ``request_throughput = completed / duration``; ``input_throughput``, ``output_throughput``,
  ``total_throughput`` = the token totals (input, output, both) / ``duration``, in tokens/s.
- ``concurrency = sum(E2E_i) / duration`` (achieved, as sglang defines it); ``max_concurrency`` is the
  configured limit.
- For each of ``ttft``, ``tpot``, ``itl``, ``e2e_latency``: ``mean_*_ms``, ``median_*_ms``, ``std_*_ms``
  (population, ``ddof=0``), ``p90_*_ms``, ``p95_*_ms``, ``p99_*_ms`` with numpy's default ``linear``
  percentile method; ``max_itl_ms``.  Any statistic over no samples is None, never 0.

Which metrics exist is :mod:`pytest_sskj.vocabulary`'s registry: :func:`compute_metrics` computes each of its
``COMPUTED`` names through :func:`computation` (a statistic in ``_STAT_FNS`` or an entry of ``_SCALARS``).

The names follow ``sglang.bench_serving``'s result JSON so existing analysis scripts keep working;
the differences are deliberate: sglang reports 0 for empty lists, counts a 200 with no tokens as a
success, stamps TTFT on non-empty *text* and ends E2E at the last line read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.vocabulary import COMPUTED
from pytest_sskj.vocabulary import STATS as _REGISTRY_STATS

if TYPE_CHECKING:
    from pytest_sskj.slo import SloGate

__all__ = [
    "LATENCY_METRICS",
    "METRICS_VERSION",
    "SPEC_REQUEST_KEYS",
    "STATS",
    "compute_metrics",
    "distribution",
    "e2e_ms",
    "itl_samples_ms",
    "percentile_note",
    "percentile_problems",
    "requests_needed",
    "tpot_ms",
    "ttft_ms",
]

METRICS_VERSION = "sskj-metrics/1"
"""Bump whenever a definition in this module's docstring changes."""

STATS = _REGISTRY_STATS
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e_latency")

Metrics = dict[str, float | int | str | None]

SPEC_REQUEST_KEYS = ("spec_request_verify_steps", "spec_request_accepted_tokens", "spec_request_draft_tokens")
"""Per-request speculative counts (verify steps, accepted and proposed draft tokens) summed over a repeat."""

PERCENTILE_CONFIDENCE = 0.95
"""The confidence at which a percentile gate must be supportable (:func:`requests_needed`)."""
MAX_LIKE_BELOW = 100
"""A p99 from fewer requests than this is, in effect, the maximum (numpy interpolates the top two)."""


def _quantile_of(metric: str) -> float | None:
    """0.99 for ``p99_ttft_ms``, 0.5 for ``median_*``; ``None`` for a metric that is not a percentile."""
    head = metric.split("_", 1)[0]
    if head == "median":
        return 0.5
    if head.startswith("p") and head[1:].isdigit():
        return int(head[1:]) / 100.0
    return None


def requests_needed(q: float, confidence: float = PERCENTILE_CONFIDENCE) -> int:
    """The fewest samples whose maximum is a distribution-free one-sided ``confidence`` upper bound of the
    ``q`` quantile: ``1 - q**n >= confidence``, i.e. ``n >= ln(1 - confidence) / ln(q)`` (p95: 59, p99: 299)."""
    import math

    return max(1, math.ceil(math.log(1.0 - confidence) / math.log(q) - 1e-12))


def percentile_note(metric: str, n: int | None) -> str:
    """``p99 of 40 requests (< 100: in effect the max)``; ``""`` for a metric that is not a percentile."""
    q = _quantile_of(metric)
    if q is None or n is None:
        return ""
    stat = metric.split("_", 1)[0]
    if q >= 0.99 and n < MAX_LIKE_BELOW:
        return f"{stat} of {n} requests (< {MAX_LIKE_BELOW}: in effect the max)"
    return f"{stat} of {n} requests"


def percentile_problems(
    gates: Iterable[SloGate], requests: int, confidence: float = PERCENTILE_CONFIDENCE
) -> list[str]:
    """Why a percentile SLO gate cannot be supported by ``requests`` per point at ``confidence``, with the
    number of requests it would need (``[]``: every gate is supportable)."""
    out = []
    for g in gates:
        metric = g.metric
        q = _quantile_of(metric)
        if q is None or q <= 0.5:
            continue
        need = requests_needed(q, confidence)
        if requests < need:
            out.append(
                f"SLO gate {metric}: {requests} requests per point cannot support a {metric.split('_', 1)[0]} at "
                f"{confidence:.0%} confidence (the max of n requests bounds it only from n = {need}); "
                f"use --requests {need} or more"
            )
    return out


def ttft_ms(rec: RequestRecord) -> float | None:
    """Time to first content token in ms; None when no token arrived or a stamp is missing."""
    if rec.t_send is None or rec.t_first is None:
        return None
    return (rec.t_first - rec.t_send) * 1000.0


def e2e_ms(rec: RequestRecord) -> float | None:
    """Send to end of stream in ms; None when a stamp is missing."""
    if rec.t_send is None or rec.t_end is None:
        return None
    return (rec.t_end - rec.t_send) * 1000.0


def tpot_ms(rec: RequestRecord) -> float | None:
    """``(E2E - TTFT) / (n - 1)`` in ms; None when ``n <= 1`` or a stamp is missing."""
    n = rec.output_tokens
    ttft = ttft_ms(rec)
    e2e = e2e_ms(rec)
    if n <= 1 or ttft is None or e2e is None:
        return None
    return (e2e - ttft) / (n - 1)


def itl_samples_ms(rec: RequestRecord) -> list[float]:
    """Per-token inter-token latencies in ms (see the module docstring)."""
    out: list[float] = []
    prev: float | None = None
    for t, c in zip(rec.chunk_times, rec.chunk_tokens, strict=True):
        if c <= 0:
            continue
        if prev is not None:
            per = (t - prev) * 1000.0 / c
            out.extend([per] * c)
        prev = t
    return out


_STAT_FNS: dict[str, Callable[[np.ndarray], float]] = {
    "mean": lambda a: float(a.mean()),
    "median": lambda a: float(np.median(a)),
    "std": lambda a: float(a.std()),
    "p90": lambda a: float(np.percentile(a, 90.0, method="linear")),
    "p95": lambda a: float(np.percentile(a, 95.0, method="linear")),
    "p99": lambda a: float(np.percentile(a, 99.0, method="linear")),
}
"""How each statistic of :data:`pytest_sskj.vocabulary.STATS` is computed (a stat added there needs its line here)."""


def distribution(name: str, values: Sequence[float]) -> dict[str, float | None]:
    """``{mean,median,std,p90,p95,p99}_<name>_ms`` over ``values``; all None when there are none."""
    if not values:
        return {f"{s}_{name}_ms": None for s in STATS}
    a = np.asarray(values, dtype=np.float64)
    return {f"{s}_{name}_ms": _STAT_FNS[s](a) for s in STATS}


def _div(num: float, den: float | None) -> float | None:
    return num / den if den else None


@dataclass(frozen=True)
class _Run:
    """What every run-level metric is computed from: the measured and the passed records, the duration and
    the latency samples by distribution name (``ttft``, ``tpot``, ``itl``, ``e2e_latency``)."""

    measured: list[RequestRecord]
    ok: list[RequestRecord]
    duration: float | None
    samples: dict[str, list[float]]

    @property
    def total_in(self) -> int:
        return sum(r.input_tokens for r in self.ok)

    @property
    def total_out(self) -> int:
        return sum(r.output_tokens for r in self.ok)


def _duration(measured: Sequence[RequestRecord]) -> float | None:
    sends = [r.t_send for r in measured if r.t_send is not None]
    ends = [r.t_end for r in measured if r.t_end is not None]
    duration = (max(ends) - min(sends)) if sends and ends else None
    return duration if duration is not None and duration > 0 else None


def _spec_sum(i: int) -> Callable[[_Run], int | None]:
    """The ``i``-th per-request speculative count summed over the completed requests (None: none reported)."""

    def total(r: _Run) -> int | None:
        counts = [rec.spec[i] for rec in r.ok if rec.spec is not None]
        return sum(counts) if counts else None

    return total


_SCALARS: dict[str, Callable[[_Run], float | int | None]] = {
    **{key: _spec_sum(i) for i, key in enumerate(SPEC_REQUEST_KEYS)},
    "completed": lambda r: len(r.ok),
    "failed": lambda r: len(r.measured) - len(r.ok),
    "duration": lambda r: r.duration,
    "total_input_tokens": lambda r: r.total_in,
    "total_output_tokens": lambda r: r.total_out,
    "request_throughput": lambda r: _div(len(r.ok), r.duration),
    "input_throughput": lambda r: _div(r.total_in, r.duration),
    "output_throughput": lambda r: _div(r.total_out, r.duration),
    "total_throughput": lambda r: _div(r.total_in + r.total_out, r.duration),
    "concurrency": lambda r: (
        _div(sum(r.samples["e2e_latency"]) / 1000.0, r.duration) if r.samples["e2e_latency"] else None
    ),
    "max_itl_ms": lambda r: max(r.samples["itl"]) if r.samples["itl"] else None,
}
"""The computation of every registry metric that is not a statistic of a latency distribution."""


def computation(name: str, run: _Run, dists: Mapping[str, Mapping[str, float | None]]) -> float | int | None:
    """``name``'s value: a statistic of a distribution (``p95_ttft_ms``) or one of :data:`_SCALARS`; a registry
    metric marked computed that has neither is a ``KeyError`` naming it (add its computation here)."""
    for dist in dists.values():
        if name in dist:
            return dist[name]
    if name not in _SCALARS:
        raise KeyError(f"metric {name!r} is marked computed in pytest_sskj/vocabulary.py but has no computation here")
    return _SCALARS[name](run)


def compute_metrics(records: Iterable[RequestRecord], *, max_concurrency: int | None = None) -> Metrics:
    """Every computed metric of the registry (:data:`pytest_sskj.vocabulary.COMPUTED`) over the measured
    (non-warmup) records, plus ``metrics_version``, ``requests``, ``total_output_tokens_counted`` and
    ``max_concurrency``; see the module docstring."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    samples = {
        "ttft": [v for v in map(ttft_ms, ok) if v is not None],
        "tpot": [v for v in map(tpot_ms, ok) if v is not None],
        "itl": [s for r in ok for s in itl_samples_ms(r)],
        "e2e_latency": [v for v in map(e2e_ms, ok) if v is not None],
    }
    run = _Run(measured, ok, _duration(measured), samples)
    dists = {lat: distribution(lat, vals) for lat, vals in samples.items()}
    m: Metrics = {
        "metrics_version": METRICS_VERSION,
        "requests": len(measured),
        "total_output_tokens_counted": sum(r.tokens_counted for r in ok),
        "max_concurrency": max_concurrency,
    }
    m.update({name: computation(name, run, dists) for name in COMPUTED})
    return m
