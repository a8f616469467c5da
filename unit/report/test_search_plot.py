"""The concurrency-search figure read back: which steps it draws, their pass/fail marks, SLO, best C, ticks."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.report.plots import plot_search
from unit.report.figure_facts import capture_figures, figure_facts


def test_steps_marks_slo_line_best_and_log_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figs = capture_figures(monkeypatch)
    verdict = {
        "backend": "marlin",
        "chunk": 8192,
        "slo": ["ttft_p95_ms<2500", "not an slo"],
        "best_concurrency": 16,
        "steps": [
            "not a step",
            {"concurrency": 8, "value": 1000.0, "passed": True},
            {"concurrency": 16, "metrics": {"p95_ttft_ms": 2000.0}, "slo_ok": True},
            {"concurrency": 32, "p95_ttft_ms": 3000.0, "passed": False},
            {"concurrency": 64, "value": 4000.0},
            {"concurrency": "many", "value": 1.0},
            {"concurrency": 128, "metrics": {}},
        ],
    }
    assert plot_search(verdict, tmp_path / "s.png") is not None
    (ax,) = figure_facts(figs[0])["axes"]
    assert ax["title"] == "Concurrency search: p95_ttft_ms per step vs the SLO, marlin chunk 8K"
    assert (ax["xlabel"], ax["ylabel"], ax["xscale"]) == ("concurrency", "p95_ttft_ms", "log")
    assert ax["xticklabels"] == ["8", "16", "32", "64"], "a step without a number or a value is not drawn"
    assert ax["legend"] == [
        "p95_ttft_ms",
        "step passed",
        "step failed (SLO miss, or not a valid measurement)",
        "SLO p95_ttft_ms < 2500",
        "best C = 16",
    ], ax["legend"]
    marks = [(ln["x"], ln["marker"]) for ln in ax["lines"] if ln["linestyle"] == "None"]
    assert marks == [([8.0], "o"), ([16.0], "o"), ([32.0], "x"), ([64.0], "o")], "no pass flag counts as passed"
    assert ax["lines"][0]["y"] == [1000.0, 2000.0, 3000.0, 4000.0]


def test_one_step_stays_linear_and_the_verdicts_own_metric_and_threshold_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figs = capture_figures(monkeypatch)
    verdict = {
        "metric": "p95_tpot_ms",
        "threshold": 60,
        "best": "none",
        "steps": [{"concurrency": 4, "value": 50.0, "passed": False}],
    }
    assert plot_search(verdict, tmp_path / "s.png", slo=["ttft_p95_ms<2500"], run_id="r9") is not None
    (ax,) = figure_facts(figs[0])["axes"]
    assert ax["title"] == "Concurrency search: p95_tpot_ms per step vs the SLO,  chunk -\nrun r9"
    assert (ax["xscale"], ax["xticklabels"]) == ("linear", ["4"])
    assert ax["legend"] == [
        "p95_tpot_ms",
        "step failed (SLO miss, or not a valid measurement)",
        "SLO p95_tpot_ms < 60",
    ], "a best that is not a number draws no line"


def test_no_drawable_step_returns_none(tmp_path: Path) -> None:
    verdict = {"steps": [{"concurrency": 8}, {"value": 3.0}, 7]}
    assert plot_search(verdict, tmp_path / "s.png", slo=["ttft_p95_ms<1"]) is None
    assert not (tmp_path / "s.png").exists()
