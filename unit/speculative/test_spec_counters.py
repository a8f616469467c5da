"""Speculative decoding's own counters read from the engine's ``/metrics`` over a point (vLLM's and llama.cpp's
``spec_decode_num_{drafts,draft_tokens,accepted_tokens}_total``) into the row: draft tokens, accepted tokens,
acceptance rate and length, ``None`` when the engine proposed no draft; and a point whose only client-bound sign is
bursty token reads is not client-bound when those counters say the server sends several tokens per step."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.bench.saturation import speculative_bursts
from pytest_sskj.telemetry.point import PointTelemetry
from pytest_sskj.telemetry.prometheus import parse, spec_counters
from pytest_sskj.telemetry.summary import summarise

LLAMACPP = """# HELP llamacpp:spec_decode_num_drafts_total verification steps
llamacpp:spec_decode_num_drafts_total {steps}
llamacpp:spec_decode_num_draft_tokens_total {draft}
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="0"}} 999
llamacpp:tokens_predicted_total 5
"""
VLLM = """vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {steps}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {draft}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
"""


def _tel(tmp_path: Path, text: str, *samples: tuple[int, int, int]) -> PointTelemetry:
    tel = PointTelemetry(tmp_path, 1.0)
    tel.records = [
        {"source": "metrics", "t": float(i), "values": parse(text.format(steps=s, draft=d, accepted=a))}
        for i, (s, d, a) in enumerate(samples)
    ]
    return tel


@pytest.mark.parametrize("text", [LLAMACPP, VLLM], ids=["llamacpp", "vllm"])
def test_the_counters_deltas_over_the_point_become_the_rows_spec_columns(tmp_path: Path, text: str) -> None:
    cols = summarise(_tel(tmp_path, text, (10, 40, 30), (30, 110, 80), (60, 200, 140)), {})
    assert cols["spec_verify_steps"] == 50 and cols["spec_draft_tokens"] == 160, cols
    assert cols["spec_accepted_tokens"] == 110 and cols["spec_accept_rate"] == pytest.approx(110 / 160, abs=1e-4)
    assert cols["spec_accept_length"] == pytest.approx(1 + 110 / 50, abs=1e-4), "bonus token included, as vLLM's"


def test_no_draft_proposed_or_no_counter_is_undefined_not_zero(tmp_path: Path) -> None:
    off = summarise(_tel(tmp_path, LLAMACPP, (0, 0, 0), (0, 0, 0)), {})
    assert off["spec_accept_rate"] is None and off["spec_draft_tokens"] is None, "speculative decoding off"
    assert spec_counters(parse("sglang:generation_tokens_total 5\n")) is None
    none = summarise(_tel(tmp_path, "sglang:generation_tokens_total {steps}\n", (1, 0, 0), (5, 0, 0)), {})
    assert none["spec_accept_rate"] is None and none["spec_accept_length"] is None


def test_bursty_reads_are_not_client_bound_when_the_server_accepts_several_tokens_per_step() -> None:
    reason = "29% of token reads carried several SSE events under one stamp (> 20%): TPOT/ITL unreliable"
    row = {"client_bound": True, "client_bound_bursts_only": True, "client_bound_reasons": reason,
           "spec_accept_length": 4.85}  # fmt: skip
    speculative_bursts(row)
    assert row["client_bound"] is False and "4.85 tokens per speculative verification step" in row["notes"][0]
    for other in ({"spec_accept_length": 1.0}, {"spec_accept_length": None}, {"client_bound_bursts_only": False}):
        row = {"client_bound": True, "client_bound_bursts_only": True, "spec_accept_length": 4.0, **other}
        speculative_bursts(row)
        assert row["client_bound"] is True, f"still client-bound with {other}"


def test_the_ab_metrics_are_canonical_names_with_a_direction_primary_first(pytester: pytest.Pytester) -> None:
    from pytest_sskj.stash import SETTINGS_KEY

    s = pytester.parseconfigure("--sskj-compare-metrics", "output_tps,tpot_p50_ms").stash[SETTINGS_KEY]
    assert s.compare_metrics == ("output_throughput", "median_tpot_ms"), "aliases map onto the canonical names"
    default = pytester.parseconfigure().stash[SETTINGS_KEY].compare_metrics
    assert default == ("input_throughput", "median_ttft_ms", "p95_ttft_ms"), "the users' prefill table by default"
    pytester.makepyfile("def test_x(): pass")
    cases = [("completed", "no better direction"), ("output_tps,output_throughput", "named twice"),
             ("output_throughput,,median_tpot_ms", "empty name"), ("tpot_p59_ms", "unknown metric")]  # fmt: skip
    for bad, says in cases:
        result = pytester.runpytest_inprocess("--sskj-compare-metrics", bad, "-p", "no:cacheprovider")
        err = result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR and says in err and "accepted:" in err, (bad, err)
