"""Every malformed server behaviour becomes a counted failure with a reason; the run never crashes."""

from __future__ import annotations

import re
import socket
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sskj.bench.runner import run_bench
from pytest_sskj.bench.workload import Workload
from pytest_sskj.testing.mock_server import FAULTS, MockConfig, MockServer

W = Workload(isl=16, osl=6, requests=6, concurrency=3, warmup=0)

REASONS = {
    "http_500": r"HTTP 500 from /\S+: .*mock: internal error",
    "truncated": r"stream ended inside a frame \(truncated\)",
    "disconnect": r"RemoteProtocolError|ReadError|incomplete chunked read",
    "bad_json": r"bad JSON frame",
    "bad_utf8": r"not valid UTF-8",
    "zero_tokens": r"HTTP 200 but no content token arrived",
    "wrong_completion_tokens": r"completion_tokens 5 != requested OSL 6",
    "wrong_prompt_tokens": r"server prompt_tokens 17 != ISL 16",
    "error_frame": r"server error frame: mock: engine failure",
    "stop_early": r"completion_tokens 3 != requested OSL 6",
    "no_done": r"without \[DONE\] or a finish reason",
}


def test_every_fault_mode_has_an_expected_reason() -> None:
    assert set(REASONS) == set(FAULTS) - {"none"}, "a fault mode of the mock server has no test"


@pytest.mark.parametrize("endpoint", ["generate", "completions"])
@pytest.mark.parametrize("fault", sorted(REASONS))
def test_fault_is_a_counted_failure_with_its_reason(fault: str, endpoint: str, tmp_path: Path) -> None:
    with MockServer(MockConfig(ttft_ms=2, itl_ms=1, fault=fault, fault_every=2)) as srv:
        r = run_bench(srv.url, replace(W, endpoint=endpoint), tmp_path)
    assert (r.metrics["completed"], r.metrics["failed"]) == (3, 3), (
        f"{fault} on every 2nd request: expected 3 completed / 3 failed, saw {r.completed}/{r.failed}: {r.failures}"
    )
    assert not r.ok
    assert len(r.failures) == 3
    for f in r.failures:
        assert re.search(REASONS[fault], f), f"reason for {fault} does not match {REASONS[fault]!r}: {f}"
    assert r.metrics["mean_ttft_ms"] is not None, "the healthy half must still be measured"


@pytest.mark.parametrize("fault", ["zero_tokens", "error_frame", "truncated", "http_500", "wrong_completion_tokens"])
def test_chat_faults_are_counted_too(fault: str, tmp_path: Path) -> None:
    with MockServer(MockConfig(fault=fault, fault_every=1)) as srv:
        r = run_bench(srv.url, replace(W, endpoint="chat", requests=3), tmp_path)
    assert r.failed == 3 and all(re.search(REASONS[fault], f) for f in r.failures), r.failures


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_usage_in_a_separate_chunk_is_accepted(endpoint: str, tmp_path: Path) -> None:
    with MockServer(MockConfig(usage_chunk="separate")) as srv:
        r = run_bench(srv.url, replace(W, endpoint=endpoint), tmp_path)
    assert r.ok, r.failures
    assert all(x.completion_tokens == 6 for x in r.records)


def test_chat_prompt_tokens_are_not_checked_because_chat_sends_text(tmp_path: Path) -> None:
    with MockServer(MockConfig(fault="wrong_prompt_tokens")) as srv:
        r = run_bench(srv.url, replace(W, endpoint="chat"), tmp_path)
    assert r.ok, r.failures


def test_early_stop_passes_only_without_ignore_eos(tmp_path: Path) -> None:
    with MockServer(MockConfig(fault="stop_early")) as srv:
        strict = run_bench(srv.url, W, tmp_path / "a")
        lenient = run_bench(srv.url, replace(W, ignore_eos=False), tmp_path / "b")
    assert strict.failed == 6
    assert lenient.ok, lenient.failures
    assert {x.finish_reason for x in lenient.records} == {"stop"}


def test_unreachable_server_fails_every_request_with_the_transport_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_bench(f"http://127.0.0.1:{port}", replace(W, requests=3), tmp_path, flush_cache=False)
    assert r.failed == 3 and r.completed == 0
    assert all("no HTTP response: ConnectError" in f for f in r.failures), r.failures
    assert r.metrics["mean_ttft_ms"] is None and r.metrics["p99_e2e_latency_ms"] is None
