"""The bench client: streaming load generator, pinned metric definitions and a strict success oracle.

Usable with or without pytest::

    from pytest_sskj.bench import Workload, run_bench
    result = run_bench("http://127.0.0.1:30000", Workload(isl=512, osl=16, requests=40, concurrency=8), out)
    assert result.ok, result.failures

Names are resolved lazily (PEP 562), so importing the pytest fixtures does not import httpx or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sskj.bench.client import BenchClient, BenchTimeouts
    from pytest_sskj.bench.metrics import METRICS_VERSION, compute_metrics
    from pytest_sskj.bench.records import RequestRecord, load_records
    from pytest_sskj.bench.result import BenchResult, RepeatsResult
    from pytest_sskj.bench.runner import arun_bench, arun_warmup, run_bench, run_repeats, run_warmup
    from pytest_sskj.bench.saturation import SaturationThresholds
    from pytest_sskj.bench.workload import Workload

__all__ = [
    "METRICS_VERSION",
    "BenchClient",
    "BenchResult",
    "BenchTimeouts",
    "RepeatsResult",
    "RequestRecord",
    "SaturationThresholds",
    "Workload",
    "arun_bench",
    "arun_warmup",
    "compute_metrics",
    "load_records",
    "run_bench",
    "run_repeats",
    "run_warmup",
]

_WHERE = {
    "BenchClient": "client",
    "BenchTimeouts": "client",
    "METRICS_VERSION": "metrics",
    "compute_metrics": "metrics",
    "RequestRecord": "records",
    "load_records": "records",
    "BenchResult": "result",
    "RepeatsResult": "result",
    "arun_bench": "runner",
    "run_bench": "runner",
    "run_repeats": "runner",
    "arun_warmup": "runner",
    "run_warmup": "runner",
    "SaturationThresholds": "saturation",
    "Workload": "workload",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'pytest_sskj.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(f"pytest_sskj.bench.{mod}"), name)
