"""``/v1/completions`` with ``return_token_ids`` (vLLM): exact per-frame token counts and per-token ITL."""

from __future__ import annotations

import pytest

from pytest_sskj.bench.endpoints import FrameInfo, get_endpoint
from pytest_sskj.bench.metrics import itl_samples_ms
from pytest_sskj.bench.oracle import judge
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.workload import Workload


def test_token_ids_payload_asks_for_return_token_ids_and_plain_completions_does_not() -> None:
    ids = get_endpoint("completions", token_ids=True)
    plain = get_endpoint("completions")
    assert ids.payload([5, 6], 4, model="m", ignore_eos=True)["return_token_ids"] is True
    assert "return_token_ids" not in plain.payload([5, 6], 4, model="m", ignore_eos=True)
    assert ids.exact_tokens is True and plain.exact_tokens is False


def test_token_ids_decoder_counts_merged_frames_and_empty_text_frames() -> None:
    d = get_endpoint("completions", token_ids=True).decoder()
    merged = d.decode({"choices": [{"index": 0, "text": "abc", "token_ids": [11, 12, 13], "finish_reason": None}]})
    partial_utf8 = d.decode({"choices": [{"index": 0, "text": "", "token_ids": [200], "finish_reason": None}]})
    last = d.decode({"choices": [{"index": 0, "text": "x", "token_ids": [7], "finish_reason": "length"}]})
    usage = d.decode({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 5}})
    assert (merged.tokens, partial_utf8.tokens, last.tokens) == (3, 1, 1)
    assert last.finish_reason == "length"
    assert usage == FrameInfo(0, None, 8, 5)


def test_plain_completions_decoder_undercounts_the_same_frames_which_is_why_ids_are_asked_for() -> None:
    d = get_endpoint("completions").decoder()
    frames = [
        {"choices": [{"text": "abc", "token_ids": [11, 12, 13], "finish_reason": None}]},
        {"choices": [{"text": "", "token_ids": [200], "finish_reason": None}]},
    ]
    assert sum(d.decode(f).tokens for f in frames) == 1, "text counting sees one token where there are four"


def test_token_ids_decoder_flags_a_content_frame_without_ids() -> None:
    d = get_endpoint("completions", token_ids=True).decoder()
    info = d.decode({"choices": [{"text": "abc", "finish_reason": None}]})
    assert info.tokens == 0 and "ignored return_token_ids" in (info.error or ""), info


def test_token_ids_only_for_completions() -> None:
    with pytest.raises(ValueError, match="completions endpoint only"):
        get_endpoint("chat", token_ids=True)
    with pytest.raises(ValueError, match="token_ids=True needs endpoint 'completions'"):
        Workload(isl=4, osl=4, requests=1, concurrency=1, endpoint="generate", token_ids=True)


def test_merged_frame_gives_one_itl_sample_per_token_and_the_oracle_checks_the_count_exactly() -> None:
    rec = RequestRecord(index=0, warmup=False, repeat=0, url="u", endpoint="completions", isl=4, osl=4)
    rec.t_send, rec.t_first, rec.t_end = 0.0, 0.1, 0.4
    rec.chunk_times[:] = [0.1, 0.4]
    rec.chunk_tokens[:] = [1, 3]
    rec.finish_reason, rec.prompt_tokens, rec.completion_tokens, rec.done_seen = "length", 4, 4, True
    rec.http_status = 200
    assert itl_samples_ms(rec) == pytest.approx([100.0, 100.0, 100.0])
    assert judge(rec, exact_tokens=True) is None
    rec.completion_tokens = 5
    assert judge(rec, exact_tokens=True) is not None, "4 counted vs 5 reported must fail when counts are exact"
