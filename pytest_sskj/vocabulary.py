"""One metric vocabulary: every metric's canonical name, unit, definition and direction.

The canonical names are ``sglang.bench_serving``'s result keys, with the unit in the name
(``p95_ttft_ms``, ``input_throughput`` in tok/s); the definitions are those of
:mod:`pytest_sskj.bench.metrics` (version ``METRICS_VERSION``).  Row columns, CSV headers, SLO gate
names, comparison metrics, the summaries and Allure parameters all take their names from
:data:`METRICS`.

Older spellings map onto exactly one canonical name and nothing else is accepted (:func:`canonical`):

- SLO spelling ``<metric>_<stat>_ms`` (the README's ``ttft_p95_ms``) -> ``<stat>_<metric>_ms``
  (``p95_ttft_ms``); ``p50`` is the median (``ttft_p50_ms`` -> ``median_ttft_ms``);
- ``input_tps`` / ``output_tps`` / ``total_tps`` -> ``input_throughput`` / ``output_throughput`` /
  ``total_throughput``.

A name that is neither canonical nor such an alias (``ttft_p59_ms``, ``foo_ms``) is refused with the
known names and the closest one.

This module is THE metric registry: each :class:`Metric` records its canonical name, unit, direction and
whether the bench computes it (``computed``).  :func:`pytest_sskj.bench.metrics.compute_metrics` iterates
:data:`COMPUTED` (a computed metric without a computation there is a ``KeyError`` on the first bench,
and ``unit/acceptance/test_metric_registry.py`` holds the two sets equal); the row columns
(:data:`pytest_sskj.records.METRIC_FIELDS`), ``medians.csv``, the chunk curve's points, the plots, the
export and the database take their names from here; an SLO may name only a computed metric
(:data:`GATEABLE`).  To add a metric: its entry in :func:`_build` and its computation in
``bench/metrics.py``; nothing else.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "ALIASES",
    "COMPARISON_METRICS",
    "COMPUTED",
    "GATEABLE",
    "LATENCIES",
    "METRICS",
    "STATS",
    "Metric",
    "UnknownMetric",
    "canonical",
    "known_names",
    "metric",
    "stored_value",
    "users_name",
]

STATS = ("mean", "median", "std", "p90", "p95", "p99")
"""Statistics of every latency distribution (``std`` is the population standard deviation)."""

LATENCIES: Mapping[str, str] = MappingProxyType(
    {
        "ttft": "time to first token: first content token received minus request sent",
        "tpot": "time per output token after the first: (E2E - TTFT) / (output tokens - 1); undefined at OSL 1",
        "itl": "inter-token latency: gap between content reads, divided over the tokens of the read",
        "e2e_latency": "end-to-end latency: end of stream minus request sent",
    }
)
_STAT_TEXT = {
    "mean": "mean",
    "median": "median (P50)",
    "std": "population standard deviation",
    "p90": "90th percentile (numpy linear)",
    "p95": "95th percentile (numpy linear)",
    "p99": "99th percentile (numpy linear)",
}
_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E"}


@dataclass(frozen=True)
class Metric:
    """One metric: canonical name, unit, definition, direction and a short label for tables."""

    name: str
    unit: str
    definition: str
    direction: str
    """``higher`` (more is better), ``lower`` (less is better) or ``none`` (a count or a setting)."""
    label: str
    computed: bool = True
    """Whether :func:`pytest_sskj.bench.metrics.compute_metrics` produces it (an SLO may name only these)."""

    @property
    def higher_is_better(self) -> bool:
        return self.direction == "higher"


def _build() -> dict[str, Metric]:
    out: dict[str, Metric] = {}

    def add(name: str, unit: str, definition: str, direction: str, label: str, computed: bool = True) -> None:
        out[name] = Metric(name, unit, definition, direction, label, computed)

    add("completed", "requests", "measured requests that passed the strict oracle", "none", "completed")
    add("failed", "requests", "measured requests that failed the strict oracle", "lower", "failed")
    add("duration", "s", "first measured send to last measured end of stream", "none", "duration")
    add("total_input_tokens", "tokens", "sum of prompt tokens over completed requests", "none", "input tokens")
    add("total_output_tokens", "tokens", "sum of output tokens over completed requests", "none", "output tokens")
    add("request_throughput", "req/s", "completed requests / duration", "higher", "Req/s")
    add("input_throughput", "tok/s", "input tokens of completed requests / duration", "higher", "Input TPS")
    add("output_throughput", "tok/s", "output tokens of completed requests / duration", "higher", "Output TPS")
    add("total_throughput", "tok/s", "input plus output tokens / duration", "higher", "Total TPS")
    add("concurrency", "requests", "achieved concurrency: sum of E2E latencies / duration", "none", "achieved C")
    for key, what, label in (
        ("verify_steps", "speculative verify steps", "spec steps (requests)"),
        ("accepted_tokens", "accepted draft tokens", "spec accepted (requests)"),
        ("draft_tokens", "proposed draft tokens", "spec drafts (requests)"),
    ):
        add(f"spec_request_{key}", "tokens" if key != "verify_steps" else "steps",
            f"{what} the server reported per completed request (SGLang meta_info), summed; None when it reports none",
            "none", label)  # fmt: skip
    for lat, text in LATENCIES.items():
        for stat in STATS:
            direction = "none" if stat == "std" else "lower"
            label = f"{_LABEL[lat]} {'P50' if stat == 'median' else stat.upper() if stat[0] == 'p' else stat}"
            add(f"{stat}_{lat}_ms", "ms", f"{_STAT_TEXT[stat]} of {text}", direction, label)
    add("max_itl_ms", "ms", "largest inter-token latency", "lower", "ITL max")
    return out


METRICS: Mapping[str, Metric] = MappingProxyType(_build())
"""Every metric a result row carries, by canonical name."""

COMPUTED = tuple(n for n, m in METRICS.items() if m.computed)
"""The metrics the bench computes, in registry order (the keys of ``compute_metrics`` besides its extras)."""

GATEABLE = tuple(n for n in COMPUTED if METRICS[n].direction != "none" or n == "concurrency")
"""Metrics an SLO gate may name: computed ones with a direction (and the achieved concurrency)."""

COMPARISON_METRICS = ("input_throughput", "median_ttft_ms", "p95_ttft_ms")
"""What an A/B comparison judges, primary first (the users' table: Input TPS, TTFT P50, TTFT P95)."""

_SLO_SPELLING = re.compile(r"^(ttft|tpot|itl|e2e_latency)_(mean|median|std|p50|p90|p95|p99)_ms$")

ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "input_tps": "input_throughput",
        "output_tps": "output_throughput",
        "total_tps": "total_throughput",
        **{
            f"{lat}_{'p50' if stat == 'median' else stat}_ms": f"{stat}_{lat}_ms" for lat in LATENCIES for stat in STATS
        },
        **{f"{lat}_median_ms": f"median_{lat}_ms" for lat in LATENCIES},
        **{f"p50_{lat}_ms": f"median_{lat}_ms" for lat in LATENCIES},
        **{f"e2e_{'p50' if stat == 'median' else stat}_ms": f"{stat}_e2e_latency_ms" for stat in STATS},
    }
)
"""Older spellings and the one canonical name each maps to."""


_USERS_NAME = {t: a for a, t in ALIASES.items() if not a.startswith(("p50_",)) and not a.endswith("_median_ms")}
"""The users' spelling of a canonical name (``median_ttft_ms`` -> ``ttft_p50_ms``), for the files that keep it."""


def users_name(name: str) -> str:
    """The users' (README, ``adaptive_points.jsonl``) spelling of ``name``; the canonical name when it has none."""
    key = canonical(name)
    return _USERS_NAME.get(key, key)


def stored_value(stored: Mapping[str, object], name: str) -> float | None:
    """``name``'s number in ``stored`` (a row, a step, a chunk-curve point), read under its canonical name or
    any alias of it (data written before the names were canonical); ``None`` when absent or not a number."""
    key = canonical(name)
    for n in (key, *(a for a, t in ALIASES.items() if t == key)):
        v = stored.get(n)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


class UnknownMetric(ValueError):
    """A metric name that is neither canonical nor an alias."""


def known_names(names: tuple[str, ...] | None = None) -> str:
    """The canonical names, comma separated (for error messages)."""
    return ", ".join(names if names is not None else tuple(METRICS))


def canonical(name: str, *, allowed: tuple[str, ...] | None = None) -> str:
    """The canonical name of ``name`` (itself or its alias' target); :class:`UnknownMetric` otherwise."""
    key = name.strip()
    target = key if key in METRICS else ALIASES.get(key)
    pool = allowed if allowed is not None else tuple(METRICS)
    if target is not None and target not in pool and not METRICS[target].computed:
        raise UnknownMetric(
            f"{key!r} is in the metric registry but the bench does not compute it, so it would never be judged; "
            f"metrics the bench computes: {known_names(tuple(n for n in pool if METRICS[n].computed))} "
            "(hint: add its computation to pytest_sskj/bench/metrics.py and set computed=True)"
        )
    if target is None or target not in pool:
        close = difflib.get_close_matches(key, [*pool, *(a for a, t in ALIASES.items() if t in pool)], n=1)
        hint = f" (did you mean {ALIASES.get(close[0], close[0])!r}?)" if close else ""
        raise UnknownMetric(f"unknown metric {key!r}{hint}; known metrics: {known_names(pool)}")
    return target


def metric(name: str) -> Metric:
    """The :class:`Metric` of ``name`` (canonical or alias)."""
    return METRICS[canonical(name)]
