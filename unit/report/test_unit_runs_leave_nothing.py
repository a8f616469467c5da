"""A self-test session given no run id leaves no acceptance clutter (:mod:`pytest_sskj.recording`): no run
directory, no results-database record, no ``sskj: run`` header; naming its run id (``SSKJ_RUN_ID`` /
``--run-id``, as ``.ci/run`` and the README's release commands do) records it, and ``release mark`` then finds
and judges it.  A session that collects anything outside ``unit/`` records as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = unit\n")
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_self.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "test_other.py").write_text("def test_other():\n    pass\n")
    (tmp_path / "release.toml").write_text('[release]\nrequired_suites = ["unit"]\n')
    return tmp_path


def _run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SSKJ_RUN_ID")}
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(ROOT), "SSKJ_REPORTS_DIR": str(cwd / "rep"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _pytest(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    res = _run(cwd, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    return out


def _written(rep: Path) -> list[str]:
    return sorted(str(p.relative_to(rep)) for p in rep.rglob("*")) if rep.exists() else []


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_unit_session_without_run_id_creates_no_run_dir_record_or_header(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    for args in (("unit/",), ("unit/test_self.py::test_one",), ()):
        out = _pytest(proj, *args)
        assert _written(proj / "rep") == [], f"pytest {' '.join(args)} wrote {_written(proj / 'rep')}"
        assert "record(s) written" not in out and "sskj: run " not in out, out[-2000:]


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_named_unit_run_is_recorded_and_release_mark_judges_it(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    _pytest(proj, "unit/")
    res = _run(proj, "-m", "pytest_sskj", "release", "mark", "--tag", "t0")
    assert res.returncode != 0 and "SSKJ_RUN_ID=unit pytest unit/" in res.stdout + res.stderr, res.stdout + res.stderr
    out = _pytest(proj, "unit/", env={"SSKJ_RUN_ID": "u-env"})
    assert "sskj: run u-env" in out and "record(s) written" in out, out[-2000:]
    outcomes = json.loads((proj / "rep" / "u-env" / "outcomes.json").read_text())
    assert outcomes["complete"] is True and len(outcomes["tests"]) == 2, outcomes
    _pytest(proj, "unit/", "--run-id", "u-cli")
    assert (proj / "rep" / "u-cli" / "manifest.json").is_file()
    res = _run(proj, "-m", "pytest_sskj", "release", "mark", "--tag", "t1")
    assert res.returncode == 0 and "u-cli" in res.stdout, res.stdout + res.stderr


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_session_collecting_outside_unit_records_as_before(tmp_path: Path) -> None:
    proj = _project(tmp_path)
    out = _pytest(proj, "other/")
    runs = [p for p in (proj / "rep").iterdir() if p.is_dir()]
    assert len(runs) == 1 and (runs[0] / "outcomes.json").is_file(), _written(proj / "rep")
    assert "record(s) written" in out, out[-2000:]
