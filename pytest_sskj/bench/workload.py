"""The benchmark workload: one serving point's shape, and the seeded prompts and arrival times it implies.

:class:`Workload` is the frozen description (ISL/OSL, request count, concurrency, warmup, seed, Poisson
rate, endpoint, token-id range).  :func:`plan_requests` turns it into concrete requests for one repeat:
prompt token ids drawn uniformly from ``[vocab_low, vocab_high)`` minus ``avoid_ids`` with a generator
seeded by ``(seed, repeat)`` -- so every repeat gets fresh ids and no prefix cache can help a later repeat
-- and lengths that are exact (``range_ratio == 1``) or uniform in ``[max(int(L*ratio), 1), L]`` as
``sglang.bench_serving --random-range-ratio`` draws them.  Arrival offsets are all 0 for an infinite rate,
else cumulative exponential gaps (a Poisson process).  Warmup requests get their own ids (never reused
by the measured requests) and at most 32 output tokens, like sglang's warmup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from pytest_sskj.bench.endpoints import ENDPOINT_NAMES

__all__ = ["DEFAULT_VOCAB_HIGH", "DEFAULT_VOCAB_LOW", "PlannedRequest", "Workload", "plan_requests"]

DEFAULT_VOCAB_LOW = 300
"""Lowest prompt token id (inclusive).  Ids 300-499 are single printable tokens of the embedded tiny model
and ordinary merged tokens (not byte, control or special tokens) in the Llama/Qwen/DeepSeek/Kimi vocabularies.
Widen the range (``vocab_high=100_000``) for MoE routing realism on a real model."""
DEFAULT_VOCAB_HIGH = 500
"""One past the highest prompt token id."""

_WARMUP_MAX_OSL = 32


@dataclass(frozen=True)
class Workload:
    """One serving point: what to send, how much of it, how fast."""

    isl: int
    """Input (prompt) tokens per request."""
    osl: int
    """Output tokens per request (``max_new_tokens`` / ``max_tokens``)."""
    requests: int
    """Measured requests."""
    concurrency: int
    """Requests in flight at most (semaphore)."""
    warmup: int = 1
    """Requests sent before the measured ones and excluded from the metrics."""
    seed: int = 42
    request_rate: float = math.inf
    """Poisson arrival rate in requests/s; ``inf`` sends everything at once (bounded by concurrency)."""
    range_ratio: float = 1.0
    """1.0: exact ISL/OSL; r < 1: each length uniform in ``[max(int(L*r), 1), L]``."""
    endpoint: str = "completions"
    model: str | None = None
    """``model`` field of OpenAI requests; None: ask ``/v1/models`` (and omit it if that fails)."""
    ignore_eos: bool = True
    vocab_low: int = DEFAULT_VOCAB_LOW
    vocab_high: int = DEFAULT_VOCAB_HIGH
    avoid_ids: tuple[int, ...] = field(default=())
    """Token ids never used in prompts (special/control ids inside the range)."""
    token_ids: bool = False
    """Ask for each stream frame's token ids (``completions`` + ``return_token_ids``, vLLM): exact output
    counts and per-token ITL even when the server merges tokens into one frame or sends ``"text": ""``."""

    def __post_init__(self) -> None:
        problems = []
        if self.isl < 1:
            problems.append(f"isl={self.isl} (must be >= 1)")
        if self.osl < 1:
            problems.append(f"osl={self.osl} (must be >= 1)")
        if self.requests < 1:
            problems.append(f"requests={self.requests} (must be >= 1)")
        if self.concurrency < 1:
            problems.append(f"concurrency={self.concurrency} (must be >= 1)")
        if self.warmup < 0:
            problems.append(f"warmup={self.warmup} (must be >= 0)")
        if not self.request_rate > 0:
            problems.append(f"request_rate={self.request_rate} (must be > 0; inf sends all at once)")
        if not 0.0 < self.range_ratio <= 1.0:
            problems.append(f"range_ratio={self.range_ratio} (must be in (0, 1])")
        if self.endpoint not in ENDPOINT_NAMES:
            problems.append(f"endpoint={self.endpoint!r} (choose one of {', '.join(ENDPOINT_NAMES)})")
        if self.token_ids and self.endpoint != "completions":
            problems.append(f"token_ids=True needs endpoint 'completions', not {self.endpoint!r}")
        if not 0 <= self.vocab_low < self.vocab_high:
            problems.append(f"vocab range [{self.vocab_low}, {self.vocab_high}) is empty or negative")
        elif len(set(range(self.vocab_low, self.vocab_high)) - set(self.avoid_ids)) < 1:
            problems.append("avoid_ids removes every id of the vocab range")
        if problems:
            raise ValueError("invalid Workload: " + "; ".join(problems))

    @property
    def label(self) -> str:
        """Short point name, e.g. ``isl512-osl16-c8``."""
        return f"isl{self.isl}-osl{self.osl}-c{self.concurrency}"


@dataclass(frozen=True)
class PlannedRequest:
    """One concrete request of a repeat."""

    index: int
    """0-based; warmup requests are numbered before the measured ones."""
    warmup: bool
    prompt_ids: tuple[int, ...]
    osl: int
    arrival_s: float
    """Offset from the start of the measured phase when it may be sent (0 for warmup)."""

    @property
    def isl(self) -> int:
        return len(self.prompt_ids)


def _lengths(rng: np.random.Generator, base: int, ratio: float, n: int) -> list[int]:
    if ratio >= 1.0:
        return [base] * n
    lo = max(int(base * ratio), 1)
    return [int(x) for x in rng.integers(lo, base + 1, size=n)]


def plan_requests(workload: Workload, repeat: int = 0) -> list[PlannedRequest]:
    """The warmup and measured requests of repeat ``repeat`` (deterministic for a given seed and repeat)."""
    w = workload
    rng = np.random.default_rng([w.seed, repeat])
    if w.avoid_ids:
        pool = np.setdiff1d(np.arange(w.vocab_low, w.vocab_high), np.asarray(w.avoid_ids))
    else:
        pool = None
    n_total = w.warmup + w.requests
    isls = _lengths(rng, w.isl, w.range_ratio, n_total)
    osls = _lengths(rng, w.osl, w.range_ratio, n_total)
    if math.isinf(w.request_rate):
        arrivals = [0.0] * w.requests
    else:
        gaps = rng.exponential(1.0 / w.request_rate, size=w.requests)
        gaps[0] = 0.0  # the first measured request goes at t0
        arrivals = [float(x) for x in np.cumsum(gaps)]
    out: list[PlannedRequest] = []
    for i in range(n_total):
        if pool is None:
            ids = rng.integers(w.vocab_low, w.vocab_high, size=isls[i])
        else:
            ids = pool[rng.integers(0, len(pool), size=isls[i])]
        warm = i < w.warmup
        out.append(
            PlannedRequest(
                index=i,
                warmup=warm,
                prompt_ids=tuple(int(x) for x in ids.tolist()),
                osl=min(osls[i], _WARMUP_MAX_OSL) if warm else osls[i],
                arrival_s=0.0 if warm else arrivals[i - w.warmup],
            )
        )
    return out
