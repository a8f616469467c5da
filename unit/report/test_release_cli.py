"""`python -m pytest_sskj release ...`: every path of the command's own text (config lookup, latest runs, list)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from unit.report.test_release import GREEN, _run, _test


def test_mark_without_a_config_anywhere_upwards_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pytest_sskj.report.release.find_config", lambda start=None: None)
    assert main(["release", "mark", "--run", "r1", "--tag", "v1", "--reports-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"no release.toml found from {tmp_path} upwards; pass --config PATH\n", err


def test_mark_with_a_bad_config_prints_what_is_wrong_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "release.toml"
    bad.write_text("[other]\n")
    assert main(["release", "mark", "--run", "r1", "--tag", "v1", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "has no [release] table" in err, err


def test_mark_without_run_names_the_latest_runs_it_judges_and_lists_accepted_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = Path(__file__).resolve().parents[2] / "release.toml"
    absent = "Skipped: needs 1 x sm120, found 0 GPUs (NVML: NVML Shared Library Not Found)"
    _run(tmp_path, [*GREEN, _test("unit/test_gpu.py::test_kernel", "skipped", "setup", absent)])
    base = ["--reports-dir", str(tmp_path), "--config", str(cfg)]
    assert main(["release", "mark", "--tag", "cpu1", "--scope", "cpu", *base]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "judging the latest runs: r1 (name others with --run)", lines
    assert lines[1] == f"marked run r1 as release cpu1: {tmp_path / 'releases' / 'cpu1.json'}", lines
    assert lines[2] == "  scope cpu: 1 skip(s) accepted, each listed in the mark", lines
    assert main(["release", "mark", "--tag", "cpu2", "--scope", "cpu", "--json", *base]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["verdict"] == "release" and "judging" not in out, out


def test_mark_with_no_runs_at_all_says_none_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = Path(__file__).resolve().parents[2] / "release.toml"
    assert main(["release", "mark", "--tag", "v1", "--reports-dir", str(tmp_path), "--config", str(cfg)]) == 1
    assert capsys.readouterr().out.startswith("judging the latest runs: (none found) (name others with --run)\n")


def test_list_when_empty_and_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["--reports-dir", str(tmp_path)]
    assert main(["release", "list", *base]) == 0
    assert capsys.readouterr().out == f"no release marks in {tmp_path / 'releases'}\n"
    assert main(["release", "list", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out) == []
    cfg = tmp_path / "release.toml"
    cfg.write_text('[release]\nrequired_suites = ["unit", "acceptance"]\n')
    _run(tmp_path)
    assert main(["release", "mark", "--run", "r1", "--tag", "v1", "--config", str(cfg), *base]) == 0
    capsys.readouterr()
    assert main(["release", "list", "--json", *base]) == 0
    marks = json.loads(capsys.readouterr().out)
    assert [(m["tag"], m["run_id"]) for m in marks] == [("v1", "r1")], marks
