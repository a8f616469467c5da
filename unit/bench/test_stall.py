"""The bench's hang bounds: a server that accepts and never answers, one that drips a byte a second
(SSE keep-alive comments, no token) and one that stops mid-stream each end the run within the stall
timeout, every request accounted for (stalled, aborted or not sent); a healthy server trips nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pytest_sskj.bench.client import BenchTimeouts
from pytest_sskj.bench.runner import run_bench
from pytest_sskj.bench.workload import Workload
from pytest_sskj.testing.mock_server import MockConfig, MockServer
from pytest_sskj.testing.stalling import Handler, drips, never_answers, serve

STALL_S = 1.5


WORKLOAD = Workload(isl=16, osl=4, requests=6, concurrency=2, warmup=0, endpoint="completions", model="m")


@pytest.mark.parametrize("handler", [never_answers, drips], ids=["accepts-never-answers", "drips-1-byte-per-s"])
def test_a_hung_server_ends_the_run_within_the_stall_timeout(tmp_path: Path, handler: Handler) -> None:
    with serve(handler) as url:
        t0 = time.perf_counter()
        res = run_bench(url, WORKLOAD, tmp_path, flush_cache=False, timeouts=BenchTimeouts.for_shape(STALL_S, 4))
        took = time.perf_counter() - t0
    assert (
        res.stalled is not None
        and "stalled: no token from the server for" in res.stalled
        and "first token pending" in res.stalled
    ), res.stalled
    assert took < STALL_S + 5.0, f"expected the run to stop about {STALL_S} s in, it took {took:.1f} s"
    assert res.metrics["completed"] == 0 and len(res.failures) == WORKLOAD.requests, res.failures
    reasons = " | ".join(res.failures)
    assert "not sent: the phase stopped" in reasons, reasons  # the 4 queued behind C=2 are never sent
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(lines) == WORKLOAD.requests, "every request is recorded"


def test_a_gap_between_tokens_longer_than_the_stall_timeout_is_a_stall(tmp_path: Path) -> None:
    cfg = MockConfig(itl_ms=3000.0, ttft_ms=0.0)
    with MockServer(cfg) as mock:
        w = Workload(isl=16, osl=4, requests=2, concurrency=2, warmup=0, endpoint="completions", model="m")
        t = BenchTimeouts(stall_s=1.0, deadline_s=None)
        res = run_bench(mock.url, w, tmp_path, flush_cache=False, timeouts=t)
    assert res.stalled is not None and "next token pending" in res.stalled, res.stalled


def test_the_deadline_bounds_a_server_that_is_slow_but_never_silent(tmp_path: Path) -> None:
    cfg = MockConfig(itl_ms=50.0, ttft_ms=10.0)
    with MockServer(cfg) as mock:
        w = Workload(isl=16, osl=200, requests=2, concurrency=2, warmup=0, endpoint="completions", model="m")
        res = run_bench(mock.url, w, tmp_path, flush_cache=False, timeouts=BenchTimeouts(stall_s=5.0, deadline_s=1.0))
    assert res.stalled is not None and "deadline: open for" in res.stalled and "per-request deadline 1 s" in res.stalled


def test_a_healthy_server_trips_no_hang_bound(tmp_path: Path) -> None:
    with MockServer(MockConfig(itl_ms=2.0, ttft_ms=10.0)) as mock:
        w = Workload(isl=16, osl=8, requests=8, concurrency=4, warmup=1, endpoint="completions", model="m")
        res = run_bench(mock.url, w, tmp_path, flush_cache=False, timeouts=BenchTimeouts.for_shape(STALL_S, 8))
    assert res.stalled is None and res.ok, (res.stalled, res.failures)


def test_the_deadline_is_derived_from_the_shape() -> None:
    t = BenchTimeouts.for_shape(30.0, 16, 8)
    assert (t.stall_s, t.deadline_s) == (30.0, 30.0 + 8 * 16 * 2.0)


def test_a_server_that_never_answers_model_discovery_hangs_within_the_stall_timeout(tmp_path: Path) -> None:
    w = Workload(isl=16, osl=4, requests=3, concurrency=1, warmup=1, endpoint="completions")  # model: discovered
    with serve(never_answers) as url:
        t0 = time.perf_counter()
        res = run_bench(url, w, tmp_path, timeouts=BenchTimeouts.for_shape(STALL_S, 4))
        took = time.perf_counter() - t0
    assert res.stalled is not None and res.stalled.startswith("GET /v1/models stalled"), res.stalled
    assert took < STALL_S + 3.0, took
    assert len(res.failures) == 3 and all("not sent" in f for f in res.failures), res.failures
