"""The bench's cache reset before a repeat: SGLang's /flush_cache, else vLLM's /reset_prefix_cache (dev mode)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from pytest_sskj.bench.client import BenchClient


def _flush(routes: dict[str, httpx.Response]) -> tuple[str, list[str]]:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return routes.get(request.url.path, httpx.Response(404, text="Not Found"))

    async def go() -> str:
        async with BenchClient(1, transport=httpx.MockTransport(handler)) as c:
            return await c.flush_cache("http://127.0.0.1:9")

    return asyncio.run(go()), seen


def test_vllm_reset_prefix_cache_is_used_where_flush_cache_is_404() -> None:
    what, seen = _flush({"/reset_prefix_cache": httpx.Response(200, json={"success": True})})
    assert what == "flushed (/reset_prefix_cache)"
    assert seen == ["POST /flush_cache", "POST /reset_prefix_cache"]


@pytest.mark.parametrize("body", [{"success": False}, {"detail": "x"}])
def test_a_reset_that_did_not_succeed_is_reported_refused(body: dict[str, object]) -> None:
    what, _ = _flush({"/reset_prefix_cache": httpx.Response(200, json=body)})
    assert what.startswith("refused (HTTP 200"), what


def test_neither_endpoint_is_unsupported_and_sglang_flush_is_tried_alone() -> None:
    assert _flush({})[0] == "unsupported (HTTP 404)"
    what, seen = _flush({"/flush_cache": httpx.Response(200, text="Cache flushed.")})
    assert (what, seen) == ("flushed", ["POST /flush_cache"])


def _flush_with(engine: str, routes: dict[str, httpx.Response]) -> tuple[str, list[str]]:
    from pytest_sskj.engines import cache_resets

    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return routes.get(request.url.path, httpx.Response(404, text="Not Found"))

    async def go() -> str:
        async with BenchClient(1, transport=httpx.MockTransport(handler)) as c:
            return await c.flush_cache("http://127.0.0.1:9", cache_resets(engine))

    return asyncio.run(go()), seen


def test_the_engines_own_cache_reset_is_the_request_the_bench_sends() -> None:
    ok = {"success": True}
    assert _flush_with("vllm", {"/reset_prefix_cache": httpx.Response(200, json=ok)}) == (
        "flushed",
        ["POST /reset_prefix_cache"],
    ), "vLLM's Engine.cache_reset alone, no SGLang /flush_cache first"
    assert _flush_with("sglang", {"/flush_cache": httpx.Response(405)}) == (
        "refused (HTTP 405: )",
        ["POST /flush_cache", "GET /flush_cache"],
    ), "SGLang's reset retries GET on 405 (older servers) and never tries vLLM's path"
    assert _flush_with("embedded", {}) == ("skipped (the engine has no cache reset)", []), "llama.cpp has none"
