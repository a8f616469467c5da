"""--resume refuses settings that change what a point measures (exit 4, naming every difference)."""

from __future__ import annotations

import json

import pytest


def _fresh_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest("--reports-dir", "rep", "--run-id", "r1", "--isl", "512", "--osl", "16")
    assert res.ret == 0, res.stdout.str()
    (pytester.path / "rep" / "r1" / "points" / "p").mkdir(parents=True)
    stored = json.loads((pytester.path / "rep" / "r1" / "measurement.json").read_text())
    assert stored["isl"] == 512 and stored["osl"] == 16 and stored["env"].startswith("sha256:"), stored


def test_changed_shape_resume_exits_4_naming_isl_and_osl(pytester: pytest.Pytester) -> None:
    _fresh_run(pytester)
    res = pytester.runpytest("--reports-dir", "rep", "--resume", "r1", "--isl", "256", "--osl", "4")
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, saw {res.ret}: {text[-600:]}"
    assert "isl: 512 in the run, 256 now" in text and "osl: 16 in the run, 4 now" in text, text[-600:]


def test_secret_bearing_settings_differ_by_name_only(pytester: pytest.Pytester) -> None:
    _fresh_run(pytester)
    res = pytester.runpytest(
        "--reports-dir", "rep", "--resume", "r1", "--isl", "512", "--osl", "16", "--sskj-env", "HF_TOKEN=hunter2"
    )
    text = res.stdout.str() + res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, text[-600:]
    assert "env: differs from the run's (values not shown)" in text and "hunter2" not in text, text[-600:]


def test_same_settings_resume_is_accepted(pytester: pytest.Pytester) -> None:
    _fresh_run(pytester)
    res = pytester.runpytest("--reports-dir", "rep", "--resume", "r1", "--isl", "512", "--osl", "16")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
