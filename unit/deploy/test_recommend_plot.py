"""The recommendation figure: one line per layout with its repeat range, SLO misses, invalid points,
the search steps and the winner, read back from the figure (not pixels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.deploy.plot import plot_recommendation
from pytest_sskj.deploy.recommend import Candidate, recommend
from unit.report.figure_facts import capture_figures, figure_facts


def _cand(layout: str, c: int, tps: tuple[float, ...], *, slo: bool | None = True, bound: bool = False) -> Candidate:
    return Candidate(layout, c, tps, len(tps), len(tps), slo, bound)


def test_nothing_to_draw_returns_none(tmp_path: Path) -> None:
    rec = recommend("x", ["a"], [], metric="total_throughput")
    assert plot_recommendation(rec, [], tmp_path / "r.png") is None and not (tmp_path / "r.png").exists()


def test_layout_lines_misses_invalid_points_steps_and_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figs = capture_figures(monkeypatch)
    cands = [
        _cand("a", 8, (100.0, 104.0, 102.0)),
        _cand("a", 16, (150.0, 151.0, 152.0)),
        _cand("a", 32, (160.0, 161.0, 162.0), slo=False),
        _cand("b", 8, (120.0, 121.0, 122.0), bound=True),
        _cand("b", 16, ()),
    ]
    rec = recommend("pd1", ["a", "b"], cands, metric="total_throughput")
    assert rec.winner is not None and (rec.winner.layout, rec.winner.concurrency) == ("a", 16)
    steps = [
        {"layout": "a", "concurrency": 64, "throughput": 90.0, "slo_ok": False},
        {"layout": "a", "concurrency": 48, "throughput": 170.0, "slo_ok": True},
        {"layout": "b", "concurrency": 4, "throughput": None},
    ]
    out = plot_recommendation(rec, steps, tmp_path / "plots" / "r.png")
    assert out == tmp_path / "plots" / "r.png" and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.parent.iterdir()] == ["r.png"], "the temporary file is renamed into place"
    (ax,) = figure_facts(figs[0])["axes"]
    assert ax["title"] == "pd1: total_throughput vs concurrency per layout"
    assert (ax["xlabel"], ax["ylabel"], ax["xscale"]) == ("concurrency", "total_throughput", "log")
    assert ax["legend"] == [
        "a (search steps)",
        "SLO miss",
        "failed / client-bound",
        "a (repeats)",
        "b (repeats)",
    ], ax["legend"]
    repeats = [(ln["x"], ln["y"], ln["color"]) for ln in ax["lines"] if ln["marker"] == "o"]
    assert repeats == [([8.0, 16.0, 32.0], [102.0, 151.0, 161.0], "C0"), ([8.0], [121.0], "C1")], (
        "one median line per layout; b's C=16 has no throughput and is not drawn"
    )
    steps_line = next(ln for ln in ax["lines"] if ln["label"] == "a (search steps)")
    assert (steps_line["x"], steps_line["y"], steps_line["linestyle"]) == ([64.0, 48.0], [90.0, 170.0], ":")
    scatter = [s["points"] for s in ax["scatter"]]
    assert scatter == [
        [[32.0, 161.0]],  # a's SLO miss
        [[64.0, 90.0]],  # a's missed search step
        [[8.0, 121.0]],  # b's client-bound point, hollow
        [[16.0, 151.0]],  # the winner's star
        [],  # legend proxies
        [],
    ], scatter
    assert ax["texts"] == [f"{rec.outcome}: a C=16"], ax["texts"]
