"""SLO gate parsing and strict evaluation; gate names are the canonical metric names (vocabulary)."""

from __future__ import annotations

import pytest

from pytest_sskj.slo import DEFAULT_SLO, evaluate_gates, parse_slo


def test_default_slo_is_the_users_strict_s2_tier() -> None:
    gates = parse_slo(DEFAULT_SLO)
    assert [str(g) for g in gates] == ["p95_ttft_ms<3000", "p95_tpot_ms<50"]


def test_strict_gate_fails_on_equality() -> None:
    (gate,) = parse_slo("ttft_p95_ms<3000")
    result = gate.check(3000.0)
    assert result.passed is False
    assert result.sentence() == "p95_ttft_ms=3000.00 >= 3000"
    assert gate.check(2999.99).passed is True


def test_undefined_metric_is_not_judged_never_passes_vacuously() -> None:
    results = evaluate_gates(parse_slo(DEFAULT_SLO), {"p95_ttft_ms": 120.0, "p95_tpot_ms": None})
    assert [r.passed for r in results] == [True, None]
    assert results[1].sentence() == "p95_tpot_ms not judged (undefined for this run)"


@pytest.mark.parametrize("text", ["ttft<", "ttft_p95_ms=<3", "3000>ttft", "ttft_p95_ms<abc"])
def test_bad_gates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"gate|number"):
        parse_slo(text)


def test_none_disables_gates() -> None:
    assert parse_slo("none") == ()


def test_old_slo_spelling_maps_onto_exactly_one_canonical_name() -> None:
    assert [str(g) for g in parse_slo("ttft_p95_ms<3000,tpot_p95_ms<50,ttft_p50_ms<9")] == [
        "p95_ttft_ms<3000",
        "p95_tpot_ms<50",
        "median_ttft_ms<9",
    ]


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("ttft_p59_ms<1", "unknown metric 'ttft_p59_ms'"),
        ("foo_ms<3", "unknown metric 'foo_ms'"),
        ("", "empty"),
        ("   ", "empty"),
        ("ttft_p95_ms<3000,", "gate 2 of 'ttft_p95_ms<3000,' is empty"),
        ("p95_ttft_ms==3", "operator '=='"),
        ("p95_ttft_ms<inf", "finite"),
        ("none,p95_ttft_ms<3", "cannot be combined"),
    ],
)
def test_mistyped_slo_is_refused_with_the_known_metrics(text: str, what: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_slo(text)
    msg = str(info.value)
    assert what in msg, f"expected {what!r} in the error, saw {msg!r}"
    if "metric" in what or ("empty" in what and "gate" in what):
        assert "known metrics: " in msg and "p95_ttft_ms" in msg, f"the error should list the known metrics: {msg}"
