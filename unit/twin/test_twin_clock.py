"""A twin run's absolute figures say they are in twin time (issue 46, item 4): the terminal, summary.md and the
export name the model's time scale; a real run's figures carry no such note."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_sskj.history.export import export_run
from pytest_sskj.report.plugin import regenerate
from pytest_sskj.twin.model import load_model
from pytest_sskj.twin.plugin import PLATFORM, clock_note, model_path, time_scale
from unit.history.conftest import make_run


def test_a_twin_runs_clock_is_its_models_time_scale_and_a_real_runs_has_none() -> None:
    scale = load_model(model_path("kimi3-pro6000")).time_scale
    twin = {"platform": PLATFORM, "twin_model": "kimi3-pro6000"}
    assert time_scale(twin) == scale and time_scale({"platform": "h200", "twin_model": None}) is None
    note = clock_note(twin)
    assert note is not None and f"time_scale {scale:g}" in note and "in twin time" in note, note
    assert clock_note({"platform": None}) is None


def test_summary_md_and_the_export_of_a_twin_run_mark_twin_time(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "reports", "tw", [100.0, 110.0], platform=PLATFORM, twin_model="kimi3-pro6000")
    scale = time_scale({"platform": PLATFORM, "twin_model": "kimi3-pro6000"})
    regenerate(run_dir, plots=False)
    assert "- clock: absolute figures are in twin time" in (run_dir / "summary.md").read_text()
    points, _, manifest, _ = export_run(run_dir)
    lines = [json.loads(x) for x in points.read_text().splitlines()]
    assert {x["twin_time_scale"] for x in lines} == {scale}, lines[0]
    assert json.loads(manifest.read_text())["twin_time_scale"] == scale
    real = make_run(tmp_path / "reports", "real", [100.0, 110.0])
    regenerate(real, plots=False)
    assert "twin time" not in (real / "summary.md").read_text()
    assert {json.loads(x)["twin_time_scale"] for x in export_run(real)[0].read_text().splitlines()} == {None}
