"""Timing-accuracy analysis: the client's stamps against the mock server's own write stamps.

The mock server (:mod:`pytest_sskj.testing.mock_server`, ``record_stamps=True``) remembers the
``perf_counter`` time at which it wrote every frame and the cumulative token count after it.  On Linux
``perf_counter`` is ``CLOCK_MONOTONIC``, one clock for every process of the host, so the client's stamps
and the server's can be subtracted directly:

- TTFT error of a request = client ``t_first`` - server write time of the first content frame
  (the true TTFT as the client should see it is that write time minus the client's ``t_send``);
- per content read ``k`` with cumulative token count ``T_k``: delivery delay ``d_k`` = client read stamp -
  server write time of the frame that completed token ``T_k``; the error of a measured inter-token gap
  is ``d_k - d_{k-1}``.

Prompts are matched to server stamps by their first 8 token ids (the plan is deterministic).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.workload import PlannedRequest

__all__ = ["timing_errors"]


def _stats(name: str, values: list[float]) -> dict[str, float | None]:
    if not values:
        return {f"{name}_p50_ms": None, f"{name}_p99_ms": None, f"{name}_max_ms": None}
    a = np.abs(np.asarray(values))
    return {
        f"{name}_p50_ms": float(np.percentile(a, 50)),
        f"{name}_p99_ms": float(np.percentile(a, 99)),
        f"{name}_max_ms": float(a.max()),
    }


def timing_errors(
    records: Sequence[RequestRecord], plan: Sequence[PlannedRequest], stamps: list[dict[str, Any]]
) -> dict[str, Any]:
    """``ttft_err_{p50,p99,max}_ms``, ``itl_err_{p50,p99,max}_ms`` (absolute values) and sample counts."""
    by_key = {s["key"]: s for s in stamps}
    ttft_err: list[float] = []
    itl_err: list[float] = []
    unmatched = 0
    for rec in records:
        p = plan[rec.index]
        s = by_key.get(",".join(map(str, p.prompt_ids[:8])))
        if s is None or rec.t_first is None or not s["writes"]:
            unmatched += 1
            continue
        write_at = {int(cum): float(t) for cum, t in s["writes"]}
        ttft_err.append((rec.t_first - s["writes"][0][1]) * 1000.0)
        cum = 0
        prev_delay: float | None = None
        for t, n in zip(rec.chunk_times, rec.chunk_tokens, strict=True):
            cum += n
            w = write_at.get(cum)
            if w is None:
                prev_delay = None
                continue
            delay = (t - w) * 1000.0
            if prev_delay is not None:
                itl_err.append(delay - prev_delay)
            prev_delay = delay
    out: dict[str, Any] = {
        "requests_matched": len(ttft_err),
        "requests_unmatched": unmatched,
        "itl_samples": len(itl_err),
    }
    out.update(_stats("ttft_err", ttft_err))
    out.update(_stats("itl_err", itl_err))
    return out
