"""`release mark|show|list` and `serve status` on files that are not what they should be (issues 40, 53): a FIFO
as the release config, as a run's outcomes or manifest, as a mark or a deployment's state file; a corrupt mark.
Each call returns within a bound with a one-line reason and a usage exit code -- never a traceback, never a hang."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from unit.foundation.test_files import bounded
from unit.report.test_release import _run

REPO_CFG = Path(__file__).resolve().parents[2] / "release.toml"


def _main_bounded(argv: list[str]) -> int:
    """``main(argv)``, 10 s at most (:func:`unit.foundation.test_files.bounded`), and no exception."""
    got = bounded(main, argv, limit_s=10.0)
    assert isinstance(got, int), f"{argv} raised {got!r} instead of refusing cleanly"
    return got


def _fifo(path: Path) -> Path:
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    return path


def test_a_fifo_as_the_release_config_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _fifo(tmp_path / "release.toml")
    assert _main_bounded(["release", "mark", "--run", "r1", "--tag", "v1", "--config", str(cfg)]) == 2
    assert (
        capsys.readouterr().err
        == f"release config {cfg} is a FIFO (named pipe), not a regular file; name a regular file\n"
    )


@pytest.mark.parametrize("name", ["outcomes.json", "manifest.json"])
def test_a_fifo_in_a_run_directory_refuses_the_mark_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    run = _run(tmp_path)
    _fifo(run / name)
    base = ["--reports-dir", str(tmp_path), "--config", str(REPO_CFG)]
    assert _main_bounded(["release", "mark", "--run", "r1", "--tag", "v1", *base]) == 1
    err = capsys.readouterr().err
    assert f"{run / name} is a FIFO (named pipe), not a regular file" in err, err


def test_a_mark_without_run_skips_a_run_whose_outcomes_are_a_fifo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fifo(_run(tmp_path) / "outcomes.json")
    base = ["--reports-dir", str(tmp_path), "--config", str(REPO_CFG)]
    assert _main_bounded(["release", "mark", "--tag", "v1", *base]) == 1
    assert capsys.readouterr().out.startswith("judging the latest runs: (none found)")


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p.write_text('{"tag": "v1", '), "is not valid JSON (Expecting property name enclosed in double"),
        (lambda p: p.write_text("[1, 2]"), "is not a JSON object (a corrupt mark); mark the release again"),
        (lambda p: p.write_bytes(b'{"tag": "\xfe"}'), "is not UTF-8 text (byte 0xfe at offset 9)"),
        (_fifo, "is a FIFO (named pipe), not a regular file"),
    ],
    ids=["truncated", "not-an-object", "not-utf8", "fifo"],
)
def test_release_show_and_list_of_a_corrupt_mark_say_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], object], expected: str
) -> None:
    (tmp_path / "releases").mkdir()
    mark = tmp_path / "releases" / "v1.json"
    make(mark)
    assert _main_bounded(["release", "show", "v1", "--reports-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"release mark {mark} ") and expected in err, err
    assert _main_bounded(["release", "list", "--json", "--reports-dir", str(tmp_path)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["tag"] == "v1" and expected in row["error"], row


def test_serve_status_of_a_state_file_that_is_a_fifo_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_sskj.serve.state import state_path

    path = state_path(tmp_path, "kimi")
    path.parent.mkdir(parents=True, exist_ok=True)
    _fifo(path)
    assert _main_bounded(["serve", "status", "kimi", "--reports-dir", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert f"deployment state file {path} is a FIFO (named pipe), not a regular file" in err, err


def test_a_runs_result_files_as_fifos_are_named_and_export_and_summary_still_return(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`export` and `report summary` read a run's result files whole: a FIFO among them (results.jsonl, .json, .csv)
    is named as a problem, never opened (it blocked the read forever), and the commands return."""
    from pytest_sskj.report.results import read_results

    _run(tmp_path)
    run_dir = tmp_path / "r1"
    for name in ("results.jsonl", "results.json", "results.csv"):
        _fifo(run_dir / name)
    got = bounded(read_results, run_dir, limit_s=10.0)
    shown = " | ".join(getattr(got, "problems", []))
    assert "results.jsonl is a FIFO (named pipe), not a regular file" in shown, f"expected the FIFO named: {shown}"
    monkeypatch.chdir(tmp_path)
    for argv in (["export", "--run", "r1", "--reports-dir", str(tmp_path)],
                 ["report", "summary", "--run", "r1", "--reports-dir", str(tmp_path)]):  # fmt: skip
        assert _main_bounded(argv) in (0, 1, 2), f"expected {argv} to return an exit status"
    assert "Traceback" not in capsys.readouterr().err
