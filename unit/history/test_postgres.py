"""The results database on a real PostgreSQL server (started by the ``postgres_url`` fixture): the same
migrations, live writes from an acceptance-shaped run, history and compare; credentials never printed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.history.db import ResultsDB
from pytest_sskj.history.importer import import_run
from unit.history.conftest import make_run


def test_postgres_schema_import_history_and_compare(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "pgA", [100.0, 104.0, 98.0])
    make_run(reports, "pgB", [100.0, 101.0, 99.0])
    db = ResultsDB(postgres_url.replace("postgresql://", "postgresql+psycopg://"))
    assert db.revision() == "0002"
    assert db.engine.dialect.name == "postgresql"
    for r in ("pgA", "pgB", "pgA"):  # importing a run again is idempotent
        import_run(db, reports / r)
    assert len(db.points_of(["pgA", "pgB"])) == 6
    password = postgres_url.split(":")[2].split("@")[0]
    monkeypatch.setenv("SSKJ_DB", postgres_url)
    assert main(["history", "--reports-dir", str(reports), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["run_id"] for r in rows} >= {"pgA", "pgB"}
    assert main(["compare", "pgA", "pgB", "--reports-dir", str(tmp_path / "elsewhere")]) == 0
    out = capsys.readouterr().out
    assert "compare run pgA -> run pgB" in out and "Input TPS" in out, out
    assert main(["db", "import", str(reports / "pgB")]) == 0
    out = capsys.readouterr().out
    assert password not in out and "***REDACTED***" in out, f"expected the URL redacted, saw {out!r}"


def test_unreachable_database_is_a_warning_with_the_retry_command(pytester: pytest.Pytester, postgres_url: str) -> None:
    """A dead server (a closed port) loses nothing: the run passes, the files are complete, the terminal
    says what was not written and how to retry, and the password appears nowhere."""
    port = postgres_url.rsplit(":", 1)[1].split("/")[0]
    dead = postgres_url.replace(f":{port}/", ":1/")  # same credentials, nothing listens on port 1
    password = postgres_url.split(":")[2].split("@")[0]
    pytester.makepyfile(
        test_x="""
def test_point(pytestconfig):
    row = {"run_id": "r", "point_id": "p-r1", "backend": "b", "status": "passed", "repeat": 1}
    pytestconfig.hook.pytest_sskj_point_finished(config=pytestconfig, result=row)
"""
    )
    res = pytester.runpytest_subprocess(
        "--sskj-db", dead, "--reports-dir", str(pytester.path / "reports"), "--run-id", "r", "-p", "no:cacheprovider"
    )
    res.assert_outcomes(passed=1)
    text = res.stdout.str() + res.stderr.str()
    assert "WARNING results database postgresql+psycopg://sskj:***REDACTED***@127.0.0.1:1/postgres not written" in text
    assert "retry: python -m pytest_sskj db import reports/r with SSKJ_DB=<the --sskj-db URL>" in text, text[-2000:]
    assert password not in text, "the database password reached the terminal"
    manifest = (pytester.path / "reports" / "r" / "manifest.json").read_text()
    assert password not in manifest, "the database password reached the manifest"
    assert (pytester.path / "reports" / "r" / "results.jsonl").is_file(), "the files must hold the point"
