"""The recommendation rule on synthetic candidates: who may win, when a lead is conclusive, expectations and floors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.deploy.plot import plot_recommendation
from pytest_sskj.deploy.recommend import Candidate, recommend


def cand(
    layout: str, c: int, tps: tuple[float, ...], *, slo: bool = True, bound: bool = False, passed: int = -1
) -> Candidate:
    n = len(tps)
    return Candidate(layout, c, tps, n, n if passed < 0 else passed, slo, bound)


def test_failed_client_bound_and_slo_missing_points_never_win_however_fast() -> None:
    cands = [
        cand("tp2dp4", 16, (900.0, 950.0, 990.0), bound=True),
        Candidate("tp4dp2", 16, (800.0, 810.0), 3, 2, True, False),  # one repeat failed
        cand("tp8dp1", 32, (700.0, 720.0, 740.0), slo=False),
        cand("tp8dp1", 16, (400.0, 410.0, 420.0)),
    ]
    rec = recommend("x", ["tp2dp4", "tp4dp2", "tp8dp1"], cands, metric="total_throughput")
    assert rec.winner is not None and (rec.winner.layout, rec.winner.concurrency) == ("tp8dp1", 16), rec.message()
    assert rec.conclusive, "the only layout with an eligible point wins by elimination"
    why = {b.layout: b.why_none for b in rec.ranked}
    assert "client-bound" in why["tp2dp4"] and "failed" in why["tp4dp2"], why


def test_a_lead_is_conclusive_only_when_repeat_ranges_do_not_overlap() -> None:
    apart = [cand("a", 8, (100.0, 101.0, 102.0)), cand("b", 8, (90.0, 91.0, 92.0))]
    rec = recommend("x", ["a", "b"], apart, metric="total_throughput", expect_layout="a")
    assert rec.outcome == "recommended" and rec.passed, rec.message()
    overlap = [cand("a", 8, (100.0, 95.0, 102.0)), cand("b", 8, (90.0, 96.0, 92.0))]
    rec = recommend("x", ["a", "b"], overlap, metric="total_throughput", expect_layout="a")
    assert rec.outcome == "inconclusive" and not rec.passed, "an unconfirmed expectation must not pass"
    assert "inconclusive" in rec.message() and "NOT confirmed" in rec.message()


def test_a_a_control_identical_layouts_are_a_tie_not_a_winner() -> None:
    same = (100.0, 104.0, 98.0)
    rec = recommend("aa", ["a", "a2"], [cand("a", 8, same), cand("a2", 8, tuple(reversed(same)))], metric="m")
    assert rec.outcome == "inconclusive", rec.message()


def test_single_measurements_never_make_a_conclusive_lead() -> None:
    rec = recommend("x", ["a", "b"], [cand("a", 8, (200.0,)), cand("b", 8, (100.0,))], metric="m")
    assert rec.winner is not None and rec.winner.layout == "a" and not rec.conclusive


@pytest.mark.parametrize(("floor", "ok"), [(150.0, True), (250.0, False)])
def test_throughput_floor(floor: float, ok: bool) -> None:
    rec = recommend("x", ["a"], [cand("a", 8, (200.0, 201.0))], metric="m", floor=floor)
    assert rec.passed is ok, rec.message()


def test_no_layout_meeting_the_slo_is_a_failed_verdict_that_says_why() -> None:
    rec = recommend(
        "x", ["a", "b"], [cand("a", 8, (1.0, 2.0), slo=False), cand("b", 8, (3.0,), bound=True)], metric="m"
    )
    assert rec.outcome == "none_meets_slo" and not rec.passed
    assert "a: C=8 SLO miss" in rec.message() and "b: C=8 invalid (client-bound)" in rec.message()
    _header, rows = rec.table()
    assert [r[1] for r in rows] == ["a", "b"] and all(str(r[-1]).startswith("cannot win") for r in rows), rows


def test_best_point_per_layout_is_its_highest_eligible_concurrency(tmp_path: Path) -> None:
    cands = [
        cand("a", 8, (100.0, 101.0)),
        cand("a", 16, (150.0, 151.0)),
        cand("a", 32, (160.0, 161.0), slo=False),
        cand("b", 8, (120.0, 121.0)),
    ]
    rec = recommend("x", ["a", "b"], cands, metric="total_throughput")
    assert [(b.layout, b.best.concurrency if b.best else None) for b in rec.ranked] == [("a", 16), ("b", 8)]
    png = plot_recommendation(
        rec, [{"layout": "a", "concurrency": 64, "throughput": 90.0, "slo_ok": False}], tmp_path / "r.png"
    )
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_repeats_each_are_too_few_for_a_conclusive_lead() -> None:
    from pytest_sskj.deploy.recommend import aa_overlap_free_p

    rec = recommend("x", ["a", "b"], [cand("a", 8, (200.0, 201.0)), cand("b", 8, (100.0, 101.0))], metric="m")
    assert rec.outcome == "inconclusive", "2 vs 2 non-overlapping happens by chance in 1 of 3 A/A pairs"
    assert aa_overlap_free_p(2, 2) == pytest.approx(1 / 3) and aa_overlap_free_p(3, 3) == pytest.approx(0.1)


class _Out:
    def __init__(self, row: dict[str, object]) -> None:
        self.row = row
        self.passed = row["status"] == "passed"
        self.status = str(row["status"])
        self.message = ""


class _FakeAcceptance:
    """A stand-in that answers serve(point) from a table of throughput/TTFT by (layout, C): for the search path."""

    def __init__(self, settings: object, table: dict[tuple[str, int], tuple[float, float]]) -> None:
        self.settings = settings
        self.table = table
        self.served: list[str] = []

    def serve(self, point: object) -> _Out:
        lay, c = point.layout, point.concurrency  # type: ignore[attr-defined]
        self.served.append(point.id)  # type: ignore[attr-defined]
        tp, ttft = self.table.get((lay, c), (10.0 * c, 100.0 * c))
        return _Out({"status": "passed", "total_throughput": tp + point.repeat, "p95_ttft_ms": ttft})  # type: ignore[attr-defined]


def test_search_mode_searches_each_layout_then_repeats_its_best_concurrency(pytester: pytest.Pytester) -> None:
    from pytest_sskj.deploy.measure import measure_recommendation, recommend_keys
    from pytest_sskj.stash import SETTINGS_KEY

    s = pytester.parseconfigure(
        "--engine", "sglang", "--layout", "tp2dp4,tp8dp1", "--isl", "1K", "--osl", "128", "--backend", "auto",
        "--chunk", "8K", "--concurrency", "16", "--repeats", "3", "--sskj-search", "double", "--sskj-search-max", "64",
        "--sskj-slo", "ttft_p95_ms<3300",
    ).stash[SETTINGS_KEY]  # fmt: skip
    [key] = recommend_keys(s)
    acc = _FakeAcceptance(s, {})  # throughput 10*C, TTFT 100*C ms: the SLO holds up to C=32 for both layouts
    rec, steps = measure_recommendation(acc, key)
    assert {st["layout"] for st in steps} == {"tp2dp4", "tp8dp1"} and max(st["concurrency"] for st in steps) == 64
    assert any(pid.endswith("-c32-r3") for pid in acc.served), "the search's best C is measured --repeats times"
    assert rec.winner is not None and rec.winner.concurrency == 32, rec.message()
    assert rec.outcome == "inconclusive", "identical layouts (an A/A pair) must not produce a conclusive winner"


def test_summary_never_pools_layouts_or_shapes() -> None:
    from pytest_sskj.report.summary import summarize_points

    def row(layout: str, isl: int, backend: str, tps: float) -> dict[str, object]:
        return {"layout": layout, "isl": isl, "osl": 16, "backend": backend, "chunk": 256, "concurrency": 4,
                "status": "passed", "input_throughput": tps, "kind": "serve"}  # fmt: skip

    rows = [row("a", 256, "x", 100.0), row("b", 256, "x", 300.0), row("a", 512, "x", 50.0), row("a", 256, "y", 110.0)]
    pts = {p.backend: p for p in summarize_points(rows, "x")}
    assert set(pts) == {"x [a 256->16]", "x [b 256->16]", "x [a 512->16]", "y [a 256->16]"}, set(pts)
    assert pts["x [b 256->16]"].input_throughput == 300.0 and pts["x [b 256->16]"].is_baseline
    assert pts["y [a 256->16]"].tps_vs_baseline_pct == pytest.approx(10.0), "y is compared with x of its own layout"
