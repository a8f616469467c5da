"""The success oracle on hand-built records: each rule, in its documented order, gives its own sentence."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sskj.bench.oracle import judge
from pytest_sskj.bench.records import RequestRecord


def _rec(**kw: Any) -> RequestRecord:
    base: dict[str, Any] = dict(
        index=0,
        warmup=False,
        repeat=0,
        url="http://127.0.0.1:1",
        endpoint="completions",
        isl=16,
        osl=4,
        http_status=200,
        frames=5,
        done_seen=True,
        prompt_tokens=16,
        completion_tokens=4,
        finish_reason="length",
        chunk_tokens=[1, 1, 1, 1],
    )
    base.update(kw)
    return RequestRecord(**base)


CASES = [
    ({}, False, None),
    ({"http_status": None, "error": "connect refused"}, False, "no HTTP response: connect refused"),
    ({"http_status": None}, False, "no HTTP response: unknown transport error"),
    ({"http_status": 503, "error": "HTTP 503: overloaded"}, False, "HTTP 503: overloaded"),
    ({"http_status": 500}, False, "HTTP 500"),
    ({"error": "bad JSON in frame 3"}, False, "bad JSON in frame 3"),
    ({"error": ""}, False, ""),
    (
        {"done_seen": False, "finish_reason": None},
        False,
        "stream ended without [DONE] or a finish reason after 5 frames (truncated stream)",
    ),
    ({"done_seen": False}, False, None),
    (
        {"chunk_tokens": []},
        False,
        "HTTP 200 but no content token arrived (5 frames, server completion_tokens=4)",
    ),
    ({"completion_tokens": None}, False, "server reported no completion_tokens (usage / meta_info missing)"),
    ({"completion_tokens": 3}, False, "completion_tokens 3 != requested OSL 4 (ignore_eos)"),
    ({"ignore_eos": False, "completion_tokens": 0}, False, "completion_tokens 0 outside [1, 4]"),
    ({"ignore_eos": False, "completion_tokens": 5}, False, "completion_tokens 5 outside [1, 4]"),
    (
        {"chunk_tokens": [2, 3]},
        False,
        "client counted 5 content tokens but the server reports completion_tokens 4",
    ),
    ({"chunk_tokens": [1, 2]}, False, None),
    (
        {"chunk_tokens": [1, 2]},
        True,
        "client counted 3 content tokens but the server reports completion_tokens 4",
    ),
    ({"prompt_tokens": 15}, False, "server prompt_tokens 15 != ISL 16 sent as token ids"),
    ({"prompt_tokens": 15, "exact_prompt": False}, False, None),
    ({"prompt_tokens": None}, False, None),
    ({"finish_reason": "stop"}, False, "finish_reason 'stop', expected 'length'"),
    ({"finish_reason": "stop", "ignore_eos": False, "completion_tokens": 2, "chunk_tokens": [2]}, True, None),
    (
        {"finish_reason": "abort", "ignore_eos": False},
        False,
        "finish_reason 'abort', expected 'length' or 'stop'",
    ),
]


@pytest.mark.parametrize(("change", "exact", "reason"), CASES)
def test_each_rule_names_what_it_expected_and_saw(change: dict[str, Any], exact: bool, reason: str | None) -> None:
    rec = _rec(**change)
    assert judge(rec, exact_tokens=exact) == reason, f"{change}: expected {reason!r}, got {rec.failure!r}"
    assert rec.failure == reason, "the verdict is stored on the record"
