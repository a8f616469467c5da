"""SLO gate parsing and strict evaluation."""

from __future__ import annotations

import pytest

from pytest_sskj.slo import DEFAULT_SLO, evaluate_gates, parse_slo


def test_default_slo_is_the_users_strict_s2_tier() -> None:
    gates = parse_slo(DEFAULT_SLO)
    assert [str(g) for g in gates] == ["ttft_p95_ms<3000", "tpot_p95_ms<50"]


def test_strict_gate_fails_on_equality() -> None:
    (gate,) = parse_slo("ttft_p95_ms<3000")
    result = gate.check(3000.0)
    assert result.passed is False
    assert result.sentence() == "ttft_p95_ms=3000.00 >= 3000"
    assert gate.check(2999.99).passed is True


def test_undefined_metric_is_not_judged_never_passes_vacuously() -> None:
    results = evaluate_gates(parse_slo(DEFAULT_SLO), {"ttft_p95_ms": 120.0, "tpot_p95_ms": None})
    assert [r.passed for r in results] == [True, None]
    assert results[1].sentence() == "tpot_p95_ms not judged (undefined for this run)"


@pytest.mark.parametrize("text", ["ttft<", "ttft_p95_ms=<3", "3000>ttft", "ttft_p95_ms<abc"])
def test_bad_gates_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"gate|number"):
        parse_slo(text)


def test_none_disables_gates() -> None:
    assert parse_slo("none") == ()
