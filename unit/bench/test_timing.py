"""Timing accuracy against the scripted server at C=64: the error is REPORTED, only gross sanity asserted.

The shared CI machine is noisy, so no tight bound is asserted here; ``benchmarks/bench_client_ingest.py
--timing`` prints the same figures for a longer run.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from pytest_sskj.bench import Workload, run_bench
from pytest_sskj.bench.workload import plan_requests
from pytest_sskj.testing.mock_server import MockConfig, spawn_mock_server
from pytest_sskj.testing.timing import timing_errors

TTFT_MS, ITL_MS = 50.0, 10.0


@pytest.mark.bench
def test_timing_error_at_c64_is_reported(tmp_path: Path, record_property: pytest.RecordProperty) -> None:
    w = Workload(isl=256, osl=16, requests=128, concurrency=64, warmup=0, endpoint="completions")
    cfg = MockConfig(ttft_ms=TTFT_MS, itl_ms=ITL_MS, record_stamps=True)
    with spawn_mock_server(cfg, tmp_path / "server") as url:
        r = run_bench(url, w, tmp_path / "bench")
        stamps = httpx.get(url + "/_mock/stamps", timeout=30).json()["requests"]
    assert r.ok, r.failures[:3]
    err = timing_errors(r.records, plan_requests(w, 0), stamps)
    for k, v in err.items():
        record_property(k, v)
    print(f"\ntiming error at C=64 vs server write stamps: {err}")
    print(
        f"measured: median TTFT {r.metrics['median_ttft_ms']:.2f} ms (scripted {TTFT_MS}), "
        f"median ITL {r.metrics['median_itl_ms']:.2f} ms (scripted {ITL_MS}), client_bound={r.client_bound}, "
        f"evidence {r.client_evidence}"
    )
    assert err["requests_matched"] == 128, f"every request must be matched to server stamps: {err}"
    # Gross sanity only (a loaded shared machine also delays the server): no token is seen before the
    # scripted TTFT, and the client is not hundreds of ms behind the server's writes.
    assert float(r.metrics["median_ttft_ms"]) >= TTFT_MS * 0.95, r.metrics["median_ttft_ms"]
    assert err["ttft_err_p50_ms"] < 250, err
    assert err["itl_err_p50_ms"] < 250, err
