"""Metric definitions against hand-computed cases (see pytest_sskj/bench/metrics.py's docstring)."""

from __future__ import annotations

import math

import pytest

from pytest_sskj.bench.metrics import (
    METRICS_VERSION,
    compute_metrics,
    distribution,
    itl_samples_ms,
    tpot_ms,
    ttft_ms,
)
from pytest_sskj.bench.records import RequestRecord


def rec(
    index: int,
    t_send: float,
    chunks: list[tuple[float, int]],
    t_end: float,
    *,
    ct: int | None,
    pt: int | None = 8,
    failure: str | None = None,
    warmup: bool = False,
) -> RequestRecord:
    r = RequestRecord(index=index, warmup=warmup, repeat=0, url="http://x", endpoint="generate", isl=8, osl=4)
    r.t_send = t_send
    r.t_first = chunks[0][0] if chunks else None
    r.chunk_times = [t for t, _ in chunks]
    r.chunk_tokens = [n for _, n in chunks]
    r.t_end = t_end
    r.completion_tokens = ct
    r.prompt_tokens = pt
    r.failure = failure
    return r


A = rec(0, 0.0, [(0.100, 1), (0.110, 1), (0.130, 2)], 0.130, ct=4)
B = rec(1, 1.0, [(1.050, 1)], 1.060, ct=1)
FAILED = rec(2, 0.5, [], 0.9, ct=None, failure="HTTP 500")


def test_per_request_ttft_tpot_itl_by_hand() -> None:
    assert ttft_ms(A) == pytest.approx(100.0)
    assert tpot_ms(A) == pytest.approx((130.0 - 100.0) / 3), "TPOT must exclude the first token: (e2e-ttft)/(n-1)"
    # gap 10 ms over 1 token, then 20 ms split evenly over the 2 tokens of the third read
    assert itl_samples_ms(A) == pytest.approx([10.0, 10.0, 10.0])


def test_single_output_token_has_no_tpot_and_no_itl() -> None:
    assert tpot_ms(B) is None, "OSL=1 must give TPOT None, never 0"
    assert itl_samples_ms(B) == []


def test_tokens_of_the_first_read_give_no_itl_sample() -> None:
    r = rec(0, 0.0, [(0.2, 3), (0.26, 3)], 0.26, ct=6)
    assert itl_samples_ms(r) == pytest.approx([20.0, 20.0, 20.0])


def test_distribution_uses_numpy_linear_percentiles_and_population_std() -> None:
    d = distribution("x", [10.0, 20.0, 30.0, 40.0])
    assert d["mean_x_ms"] == pytest.approx(25.0)
    assert d["median_x_ms"] == pytest.approx(25.0)
    assert d["std_x_ms"] == pytest.approx(math.sqrt(125.0))
    assert d["p90_x_ms"] == pytest.approx(37.0)
    assert d["p95_x_ms"] == pytest.approx(38.5)
    assert d["p99_x_ms"] == pytest.approx(39.7)


def test_empty_distribution_is_none_never_zero() -> None:
    assert set(distribution("tpot", []).values()) == {None}


def test_run_metrics_by_hand() -> None:
    warm = rec(9, -5.0, [(-4.9, 1)], -4.0, ct=1, warmup=True)
    m = compute_metrics([A, B, FAILED, warm], max_concurrency=2)
    assert m["metrics_version"] == METRICS_VERSION
    assert (m["requests"], m["completed"], m["failed"]) == (3, 2, 1), "warmup must not be counted"
    assert m["duration"] == pytest.approx(1.06)  # first measured send 0.0 -> last measured end 1.06
    assert m["total_input_tokens"] == 16
    assert m["total_output_tokens"] == 5
    assert m["request_throughput"] == pytest.approx(2 / 1.06)
    assert m["input_throughput"] == pytest.approx(16 / 1.06)
    assert m["output_throughput"] == pytest.approx(5 / 1.06)
    assert m["total_throughput"] == pytest.approx(21 / 1.06)
    assert m["concurrency"] == pytest.approx((0.130 + 0.060) / 1.06)
    assert m["mean_ttft_ms"] == pytest.approx(75.0)
    assert m["median_e2e_latency_ms"] == pytest.approx(95.0)
    assert m["mean_tpot_ms"] == pytest.approx(10.0), "B (one token) must not enter the TPOT distribution"
    assert m["p99_itl_ms"] == pytest.approx(10.0)
    assert m["max_itl_ms"] == pytest.approx(10.0)
    assert m["max_concurrency"] == 2


def test_osl_one_run_reports_tpot_and_itl_as_none() -> None:
    rs = [rec(i, float(i), [(i + 0.05, 1)], i + 0.06, ct=1) for i in range(4)]
    m = compute_metrics(rs)
    for s in ("mean", "median", "std", "p90", "p95", "p99"):
        assert m[f"{s}_tpot_ms"] is None, f"{s}_tpot_ms must be None with OSL=1, got {m[f'{s}_tpot_ms']}"
        assert m[f"{s}_itl_ms"] is None
    assert m["p95_ttft_ms"] == pytest.approx(50.0)


def test_all_failed_run_has_no_latency_values() -> None:
    m = compute_metrics([FAILED])
    assert m["completed"] == 0 and m["failed"] == 1
    assert m["mean_ttft_ms"] is None and m["concurrency"] is None
    assert m["request_throughput"] == 0.0


def test_server_counts_take_precedence_over_client_counts() -> None:
    r = rec(0, 0.0, [(0.1, 1), (0.2, 1)], 0.2, ct=2, pt=None)
    assert r.output_tokens == 2 and r.input_tokens == 8, "without server prompt_tokens the sent ISL counts"


def test_percentile_support_names_the_requests_a_gate_needs() -> None:
    from pytest_sskj.bench.metrics import percentile_note, percentile_problems, requests_needed
    from pytest_sskj.slo import parse_slo

    assert (requests_needed(0.95), requests_needed(0.99), requests_needed(0.90)) == (59, 299, 29)
    assert percentile_note("p99_ttft_ms", 40) == "p99 of 40 requests (< 100: in effect the max)"
    assert percentile_note("p95_ttft_ms", 40) == "p95 of 40 requests" and percentile_note("mean_ttft_ms", 40) == ""
    gates = parse_slo("p95_ttft_ms<3000,median_ttft_ms<100,input_throughput>1")
    probs = percentile_problems(gates, 40)
    assert len(probs) == 1 and "p95_ttft_ms" in probs[0] and "--requests 59" in probs[0], probs
    assert percentile_problems(gates, 59) == []
