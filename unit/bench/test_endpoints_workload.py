"""Endpoint adapters (payloads, frame decoding) and workload planning (seeded ids, lengths, arrivals)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_sskj.bench.endpoints import FrameInfo, get_endpoint
from pytest_sskj.bench.workload import Workload, plan_requests


def test_generate_payload_sends_token_ids_and_sampling_params() -> None:
    body = get_endpoint("generate").payload([5, 6, 7], 16, model=None, ignore_eos=True)
    assert body == {
        "input_ids": [5, 6, 7],
        "sampling_params": {"max_new_tokens": 16, "ignore_eos": True, "temperature": 0.0},
        "stream": True,
    }


def test_completions_payload_asks_for_usage_and_exact_length() -> None:
    body = get_endpoint("completions").payload([5, 6], 4, model="m", ignore_eos=True)
    assert body["prompt"] == [5, 6] and body["max_tokens"] == 4 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"
    assert "model" not in get_endpoint("completions").payload([1], 1, model=None, ignore_eos=True)


def test_chat_payload_is_text_one_word_per_id() -> None:
    body = get_endpoint("chat").payload([0, 1, 2], 4, model=None, ignore_eos=False)
    assert body["messages"] == [{"role": "user", "content": "the for this"}]


def test_unknown_endpoint_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="completions, generate, chat"):
        get_endpoint("grpc")


def test_generate_decoder_counts_cumulative_frames_by_completion_tokens() -> None:
    d = get_endpoint("generate").decoder()
    f1 = d.decode(
        {
            "text": "a",
            "output_ids": [1],
            "meta_info": {"completion_tokens": 1, "prompt_tokens": 8, "finish_reason": None},
        }
    )
    f2 = d.decode(
        {
            "text": "abc",
            "output_ids": [1, 2, 3],
            "meta_info": {"completion_tokens": 3, "prompt_tokens": 8, "finish_reason": {"type": "length"}},
        }
    )
    assert f1 == FrameInfo(1, None, 8, 1)
    assert f2 == FrameInfo(2, "length", 8, 3), "a cumulative frame adds only the new tokens"


def test_generate_decoder_without_meta_counts_output_ids_growth() -> None:
    d = get_endpoint("generate").decoder()
    assert d.decode({"output_ids": [1, 2]}).tokens == 2
    assert d.decode({"output_ids": [1, 2, 3, 4]}).tokens == 2


def test_generate_decoder_flags_a_count_going_backwards() -> None:
    d = get_endpoint("generate").decoder()
    d.decode({"meta_info": {"completion_tokens": 3}})
    assert "backwards" in (d.decode({"meta_info": {"completion_tokens": 2}}).error or "")


def test_openai_decoders_ignore_role_and_usage_only_chunks() -> None:
    chat = get_endpoint("chat").decoder()
    assert chat.decode({"choices": [{"delta": {"role": "assistant"}}]}).tokens == 0
    assert chat.decode({"choices": [{"delta": {"content": "hi"}}]}).tokens == 1
    assert chat.decode({"choices": [{"delta": {"reasoning_content": "hm"}}]}).tokens == 1
    usage = chat.decode({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    assert usage == FrameInfo(0, None, 3, 2)
    comp = get_endpoint("completions").decoder()
    assert comp.decode({"choices": [{"text": "", "finish_reason": None}], "usage": None}).tokens == 0
    assert comp.decode({"choices": [{"text": " x", "finish_reason": "length"}]}) == FrameInfo(1, "length")


@pytest.mark.parametrize(
    ("frame", "needle"),
    [
        ({"error": {"message": "boom", "code": 400}}, "boom (code 400)"),
        ({"error": "plain"}, "plain"),
        ({"object": "error", "message": "vllm style"}, "vllm style"),
    ],
)
def test_error_frames_are_reported_by_every_adapter(frame: dict[str, object], needle: str) -> None:
    for name in ("generate", "completions", "chat"):
        err = get_endpoint(name).decoder().decode(frame).error
        assert err is not None and needle in err, f"{name} adapter missed the error frame {frame}: {err}"


def test_workload_is_deterministic_and_fresh_per_repeat() -> None:
    w = Workload(isl=64, osl=4, requests=5, concurrency=2, warmup=1)
    a, b, c = plan_requests(w, 0), plan_requests(w, 0), plan_requests(w, 1)
    assert a == b, "same seed and repeat must give the same prompts"
    ids_r0 = {p.prompt_ids for p in a}
    assert not ids_r0 & {p.prompt_ids for p in c}, "a repeat must not reuse any prompt of another repeat"
    assert len(ids_r0) == 6, "warmup and measured prompts must all differ"
    assert [p.warmup for p in a] == [True] + [False] * 5
    assert all(300 <= t < 500 for p in a for t in p.prompt_ids)
    assert all(p.isl == 64 and p.osl == 4 for p in a)


def test_workload_avoids_listed_ids_and_honours_range_ratio() -> None:
    w = Workload(
        isl=100,
        osl=50,
        requests=50,
        concurrency=1,
        warmup=0,
        range_ratio=0.5,
        vocab_low=10,
        vocab_high=14,
        avoid_ids=(11, 12),
    )
    plan = plan_requests(w)
    assert {t for p in plan for t in p.prompt_ids} == {10, 13}
    assert all(50 <= p.isl <= 100 and 25 <= p.osl <= 50 for p in plan)
    assert len({p.isl for p in plan}) > 1, "range_ratio 0.5 must vary the lengths"


def test_warmup_output_is_capped_at_32_tokens() -> None:
    plan = plan_requests(Workload(isl=8, osl=100, requests=1, concurrency=1, warmup=2))
    assert [p.osl for p in plan] == [32, 32, 100]


def test_poisson_arrivals_have_the_requested_mean_rate() -> None:
    plan = plan_requests(Workload(isl=4, osl=1, requests=2000, concurrency=8, warmup=0, request_rate=50.0))
    arrivals = [p.arrival_s for p in plan]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    rate = (len(arrivals) - 1) / arrivals[-1]
    assert 45 < rate < 55, f"mean rate {rate:.1f}/s, expected about 50/s"
    assert all(p.arrival_s == 0.0 for p in plan_requests(Workload(isl=4, osl=1, requests=3, concurrency=1)))


def test_invalid_workload_names_every_problem() -> None:
    with pytest.raises(ValueError, match=r"isl=0.*concurrency=0.*endpoint='x'"):
        Workload(isl=0, osl=1, requests=1, concurrency=0, endpoint="x")
    with pytest.raises(ValueError, match="request_rate"):
        Workload(isl=1, osl=1, requests=1, concurrency=1, request_rate=-1.0)
    assert math.isinf(Workload(isl=1, osl=1, requests=1, concurrency=1).request_rate)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=40), st.integers(min_value=1, max_value=12))
def test_generate_read_fast_path_agrees_with_frame_by_frame_decoding(steps: list[int], read_size: int) -> None:
    """One FrameInfo per read from meta_info alone must give the same counts as decoding every frame."""
    import json as _json

    from pytest_sskj.bench.endpoints import GenerateEndpoint

    ep = GenerateEndpoint()
    frames, total = [], 0
    for i, step in enumerate(steps):
        total += step
        last = i == len(steps) - 1
        meta = {
            "id": "r",
            "prompt_tokens": 7,
            "completion_tokens": total,
            "finish_reason": {"type": "length"} if last else None,
        }
        frames.append(_json.dumps({"text": "x" * total, "output_ids": list(range(total)), "meta_info": meta}))
    reads = [frames[i : i + read_size] for i in range(0, len(frames), read_size)]
    fast_dec, slow_dec = ep.decoder(), ep.decoder()
    fast_tokens, slow_tokens = [], []
    fast_finish = slow_finish = None
    for datas in reads:
        info = ep.read_info(datas, fast_dec)
        assert info is not None, "well-formed cumulative frames take the fast path"
        fast_tokens.append(info.tokens)
        fast_finish = info.finish_reason or fast_finish
        n = 0
        for obj in ep.loads_many(datas):
            fi = slow_dec.decode(obj)
            n += fi.tokens
            slow_finish = fi.finish_reason or slow_finish
        slow_tokens.append(n)
    assert fast_tokens == slow_tokens and fast_finish == slow_finish == "length"


def test_generate_fast_path_defers_backwards_counts_and_aborts_to_the_frame_path() -> None:
    import json as _json

    from pytest_sskj.bench.endpoints import GenerateEndpoint

    ep = GenerateEndpoint()
    dec = ep.decoder()
    assert ep.read_info([_json.dumps({"meta_info": {"completion_tokens": 3}})], dec) is not None
    backwards = [_json.dumps({"meta_info": {"completion_tokens": 2}})]
    assert ep.read_info(backwards, dec) is None, "a count going backwards must reach the per-frame error path"
    abort = [_json.dumps({"meta_info": {"completion_tokens": 4, "finish_reason": {"type": "abort", "message": "x"}}})]
    assert ep.read_info(abort, dec) is None
    assert ep.read_info(['{"error": {"message": "boom"}}'], dec) is None
