"""Chunk curve and the adaptive concurrency search (pure algorithms over fake measurements)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sskj.acceptance.curve import build_curve
from pytest_sskj.acceptance.search import highest_met, judge, search, slo_view
from pytest_sskj.slo import parse_slo

SLO = parse_slo("ttft_p95_ms<3000,tpot_p95_ms<50")


def _rows(tps: float, ttft: float, status: str = "passed") -> list[dict[str, Any]]:
    return [
        {"status": status, "input_throughput": tps + d, "median_ttft_ms": ttft, "p95_ttft_ms": ttft * 1.05}
        for d in (-1.0, 0.0, 1.0)
    ]


def test_curve_names_8k_best_like_the_users_data() -> None:
    c = build_curve(
        "marlin",
        8,
        {4096: _rows(2694.53, 48860), 8192: _rows(2935.02, 43510), 16384: _rows(2812.91, 45470)},
        expected_best=8192,
    )
    assert c.best is not None and c.best.chunk == 8192 and c.passed is True
    text = c.describe()
    assert text.startswith("marlin C=8: best chunk 8192 (2935.02 input TPS"), text
    assert "4096 −8.19 % TPS" in text and "16384 −4.16 % TPS" in text and "met" in text


def test_curve_expectation_fails_when_another_chunk_wins() -> None:
    c = build_curve("marlin", 8, {4096: _rows(3000, 40000), 8192: _rows(2935, 43510)}, expected_best=8192)
    assert c.passed is False and "expected best 8192: NOT met" in c.describe()


def test_curve_ignores_failed_repeats() -> None:
    c = build_curve("x", 8, {512: _rows(10, 1, "failed"), 1024: _rows(5, 1)})
    assert c.best is not None and c.best.chunk == 1024 and c.points[0].input_tps is None


def test_slo_view_keeps_canonical_names_and_never_judges_tpot_at_osl_1() -> None:
    m = {"p95_ttft_ms": 2999.0, "p95_tpot_ms": 0.0, "median_ttft_ms": 10.0}
    v = slo_view(m, osl=1)
    assert v["p95_ttft_ms"] == 2999.0 and v["median_ttft_ms"] == 10.0 and v["p95_tpot_ms"] is None
    ok, results = judge(SLO, m, osl=1)
    assert ok and [r.sentence() for r in results] == [
        "p95_ttft_ms=2999.00 < 3000",
        "p95_tpot_ms not judged (undefined for this run)",
    ]
    ok, results = judge(SLO, {"p95_ttft_ms": 3000.0, "p95_tpot_ms": 10.0}, osl=16)
    assert not ok and results[0].sentence() == "p95_ttft_ms=3000.00 >= 3000", "the SLO is strict: 3000 fails"


def _server(capacity: float, saturate_at: int = 10**6) -> Any:
    """A fake server: TTFT P95 grows linearly with C; throughput grows until ``saturate_at``."""
    calls: list[int] = []

    def measure(c: int) -> dict[str, Any]:
        calls.append(c)
        return {
            "p95_ttft_ms": 3000.0 * c / capacity,
            "p95_tpot_ms": 10.0,
            "request_throughput": float(min(c, saturate_at)),
        }

    measure.calls = calls  # type: ignore[attr-defined]
    return measure


def test_add16_steps_up_and_steps_back_on_the_first_miss() -> None:
    m = _server(capacity=50)  # C < 50 meets the SLO
    r = search("add16", m, SLO, osl=16, max_c=256)
    assert m.calls == [16, 32, 48, 64] and r.best == 48
    assert "SLO missed at C=64" in r.stop_reason and "stepped back to C=48" in r.stop_reason
    assert r.passed and r.message().startswith("add16: highest concurrency meeting the SLO = C=48")


def test_add16_halves_when_16_already_misses() -> None:
    m = _server(capacity=6)
    r = search("add16", m, SLO, osl=16, max_c=256, floor=8)
    assert m.calls == [16, 8, 4] and r.best == 4
    assert not r.passed and "floor C=8: NOT met" in r.message()


def test_double_stops_at_saturation_or_slo_or_max() -> None:
    m = _server(capacity=1000, saturate_at=8)
    r = search("double", m, SLO, osl=16, max_c=256)
    assert m.calls == [1, 2, 4, 8, 16] and r.best == 16 and "saturated at C=16" in r.stop_reason
    m2 = _server(capacity=20)
    r2 = search("double", m2, SLO, osl=16, max_c=256)
    assert m2.calls == [1, 2, 4, 8, 16, 32] and r2.best == 16 and "SLO missed at C=32" in r2.stop_reason
    m3 = _server(capacity=1000)
    r3 = search("double", m3, SLO, osl=16, max_c=4)
    assert r3.best == 4 and "maximum C=4" in r3.stop_reason


def test_the_answer_names_what_it_is_saturation_knee_or_slo_limit() -> None:
    r = search("double", _server(capacity=1000, saturate_at=2), SLO, osl=16, max_c=256)
    assert r.answer == "saturation" and "saturation knee" in r.message(), r.message()
    assert "highest concurrency meeting the SLO" not in r.message(), r.message()
    r2 = search("double", _server(capacity=20), SLO, osl=16, max_c=256)
    assert r2.answer == "slo_limit" and r2.as_dict()["answer"] == "slo_limit"


def test_highest_met_is_the_highest_concurrency_whose_every_repeat_met_the_slo() -> None:
    def row(c: int, met: bool, status: str = "passed") -> dict[str, Any]:
        return {"concurrency": c, "status": status, "slo_met": {"p95_ttft_ms<3000": met}}

    rows = [row(8, True), row(16, True), row(16, True), row(32, True), row(32, False), row(64, True, "failed")]
    assert highest_met(rows) == 16
    assert highest_met([row(8, False)]) is None


def test_broken_step_counts_as_a_miss() -> None:
    def measure(c: int) -> dict[str, Any]:
        return {"ok": c < 32, "error": "3/40 requests failed", "p95_ttft_ms": 1.0}

    r = search("add16", measure, SLO, osl=16, max_c=256)
    assert r.best == 16 and "3/40 requests failed" in r.stop_reason


def test_resume_reuses_known_steps_and_reports_only_new_ones() -> None:
    m = _server(capacity=50)
    seen: list[int] = []
    known = {16: {"p95_ttft_ms": 960.0, "p95_tpot_ms": 10.0}, 32: {"p95_ttft_ms": 1920.0, "p95_tpot_ms": 10.0}}
    r = search("add16", m, SLO, osl=16, max_c=256, known=known, on_step=lambda s: seen.append(s.concurrency))
    assert m.calls == [48, 64], "steps measured before the interruption must not be repeated"
    assert seen == [48, 64] and r.best == 48 and [s.resumed for s in r.steps] == [True, True, False, False]


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown search mode 'binary'"):
        search("binary", _server(1), SLO, osl=1, max_c=8)


def test_search_never_takes_a_client_bound_step_as_its_answer() -> None:
    inner = _server(capacity=50)

    def measure(c: int) -> dict[str, Any]:
        m = inner(c)
        if c in (1, 8):  # invalid measurements: the client limited them
            m.update(client_bound=True, ok=False, error="[client-bound] evidence")
        return m

    r = search("double", measure, SLO, osl=16, max_c=8)
    assert r.best == 4, f"expected the best valid step C=4 (C=8 was client-bound), saw {r.best}: {r.message()}"
    assert [s.concurrency for s in r.steps if s.client_bound] == [1, 8]
    assert "C=1 client-bound" in r.message() and "C=8 client-bound" in r.message()
    assert not any(s.slo_ok for s in r.steps if s.client_bound)
