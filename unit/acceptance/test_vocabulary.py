"""The one metric vocabulary: names the bench produces, aliases, and what SLO gates may name."""

from __future__ import annotations

import pytest

from pytest_sskj.bench.metrics import compute_metrics
from pytest_sskj.vocabulary import ALIASES, COMPARISON_METRICS, METRICS, UnknownMetric, canonical, metric


def test_every_numeric_metric_the_bench_computes_is_in_the_vocabulary() -> None:
    produced = {k for k in compute_metrics([]) if k not in ("metrics_version", "requests", "max_concurrency")}
    produced.discard("total_output_tokens_counted")
    missing = sorted(produced - set(METRICS))
    assert not missing, f"expected every bench metric in vocabulary.METRICS, missing {missing}"


def test_every_alias_maps_to_one_canonical_metric() -> None:
    for alias, target in ALIASES.items():
        assert target in METRICS, f"alias {alias} -> {target}: target not canonical"
        assert alias not in METRICS, f"alias {alias} shadows a canonical name"
    assert canonical("ttft_p95_ms") == "p95_ttft_ms" and canonical("ttft_p50_ms") == "median_ttft_ms"
    assert canonical("input_tps") == "input_throughput"


def test_units_and_directions() -> None:
    assert metric("p95_ttft_ms").unit == "ms" and not metric("p95_ttft_ms").higher_is_better
    assert metric("input_throughput").unit == "tok/s" and metric("input_throughput").higher_is_better
    assert [metric(m).label for m in COMPARISON_METRICS] == ["Input TPS", "TTFT P50", "TTFT P95"]


def test_unknown_name_lists_the_known_ones_and_suggests_the_closest() -> None:
    with pytest.raises(UnknownMetric) as info:
        canonical("ttft_p59_ms")
    msg = str(info.value)
    assert "unknown metric 'ttft_p59_ms'" in msg and "known metrics: " in msg and "p95_ttft_ms" in msg, msg


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["--sskj-slo", "ttft_p59_ms<1"], "unknown metric 'ttft_p59_ms'"),
        (["--sskj-slo", "foo_ms<3"], "unknown metric 'foo_ms'"),
        (["--sskj-slo="], "empty"),
        (["--sskj-slo", "ttft_p95_ms<3000,"], "is empty (a stray or trailing comma)"),
        (["--sskj-slo", "p95_ttft_ms=>3"], "operator '=>'"),
    ],
)
def test_mistyped_slo_on_the_command_line_exits_4_before_anything_runs(
    pytester: pytest.Pytester, args: list[str], what: str
) -> None:
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    res = pytester.runpytest(*args)
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, saw {res.ret}: {text[-800:]}"
    assert what in text and "--sskj-slo" in text, f"expected {what!r} and the option name in: {text[-800:]}"
