"""The bench client against a real engine: llama.cpp's server (xllamacpp) on the generated tiny model.

40/40 requests at ISL 512 / OSL 16 / C 8 with exact server token counts, through the strict oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sskj.bench import Workload, run_bench

pytest.importorskip("xllamacpp", reason="the embedded engine needs xllamacpp (pip install -e '.[embedded]')")

from pytest_sskj.server.embedded import ensure_tiny_model
from pytest_sskj.server.standalone import embedded_server

W = Workload(isl=512, osl=16, requests=40, concurrency=8, warmup=1, endpoint="completions")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def engine(models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log = tmp_path_factory.mktemp("logs") / "embedded.log"
    with embedded_server(ensure_tiny_model(models), slots=8, log_path=log) as url:
        yield url


def test_forty_of_forty_at_isl512_osl16_c8_with_exact_counts(engine: str, tmp_path: Path) -> None:
    r = run_bench(engine, W, tmp_path)
    assert r.ok, f"expected 40/40 through the strict oracle, got {r.completed}/40: {r.failures[:3]}"
    assert (r.metrics["completed"], r.metrics["failed"]) == (40, 0)
    assert {(x.prompt_tokens, x.completion_tokens, x.finish_reason) for x in r.records} == {(512, 16, "length")}
    assert all(x.tokens_counted == 16 for x in r.records), "llama.cpp streams one text chunk per token here"
    assert r.metrics["total_input_tokens"] == 40 * 512 and r.metrics["total_output_tokens"] == 40 * 16
    assert r.cache_flush == {engine: "unsupported (HTTP 404)"}, "llama.cpp has no /flush_cache"
    for k in ("p95_ttft_ms", "p95_tpot_ms", "p99_itl_ms", "p99_e2e_latency_ms", "input_throughput"):
        assert isinstance(r.metrics[k], float) and r.metrics[k] > 0, f"{k} = {r.metrics[k]}"
    print(f"\nembedded engine: {r.summary()}; input {r.metrics['input_throughput']:.0f} tok/s")


def test_chat_endpoint_and_usage_chunk_on_the_real_engine(engine: str, tmp_path: Path) -> None:
    r = run_bench(engine, replace(W, endpoint="chat", requests=8, isl=64), tmp_path)
    assert r.ok, r.failures[:3]
    assert {x.completion_tokens for x in r.records} == {16}


def test_generate_endpoint_missing_on_llama_cpp_is_a_counted_failure(engine: str, tmp_path: Path) -> None:
    r = run_bench(engine, replace(W, endpoint="generate", requests=3, warmup=0), tmp_path)
    assert r.failed == 3 and all("HTTP 404 from /generate" in f for f in r.failures), r.failures


def test_ignore_eos_honoured_and_eos_only_answers_fail_the_oracle(models: Path, tmp_path: Path) -> None:
    eos_model = ensure_tiny_model(models, eos_bias=1.0)
    with embedded_server(eos_model, slots=8, log_path=tmp_path / "eos.log") as url:
        strict = run_bench(url, replace(W, requests=8, isl=64), tmp_path / "a")
        natural = run_bench(url, replace(W, requests=8, isl=64, ignore_eos=False), tmp_path / "b")
    assert strict.ok and {x.completion_tokens for x in strict.records} == {16}, strict.failures[:3]
    # Without ignore_eos the only token is </s>, which has no text: HTTP 200, completion_tokens 1, nothing
    # streamed -- sglang#12389's "success" with TTFT 0.  The strict oracle fails it, with the reason.
    assert {(x.completion_tokens, x.finish_reason, x.tokens_counted) for x in natural.records} == {(1, "stop", 0)}
    assert natural.failed == 8 and all("no content token arrived" in f for f in natural.failures)
    assert natural.metrics["mean_ttft_ms"] is None, "no request produced a token: TTFT is undefined, not 0"
