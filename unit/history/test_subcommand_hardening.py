"""Subcommands given bad targets or damaged files (issue 40): a one-line refusal naming what was wrong and what is
accepted, never a traceback, never a write outside what the user named."""

from __future__ import annotations

import contextlib
import fnmatch
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_sskj.__main__ import main
from pytest_sskj.report.release import list_releases
from pytest_sskj.report.release_scope import describe_release
from unit.history.conftest import make_run


def _call(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue()


@pytest.mark.parametrize(
    ("out", "shown"),
    [
        ("a_file", "export --out *a_file: is a file; give a folder*"),
        ("a_file/below", "export --out *below: lies below *a_file, which is a file*"),
        ("/proc/sskj-export", "export of runA not written: *"),
    ],
)
def test_export_to_a_file_or_an_unwritable_place_is_refused_in_one_line(tmp_path: Path, out: str, shown: str) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0, 120.0])
    (tmp_path / "a_file").write_text("keep me\n")
    target = out if out.startswith("/") else str(tmp_path / out)
    code, text = _call(["export", "--run", "runA", "--reports-dir", str(reports), "--out", target])
    assert code != 0 and "Traceback" not in text, f"expected a one-line refusal, got exit {code}:\n{text}"
    assert any(fnmatch.fnmatch(line, f"*{shown}") for line in text.splitlines()), text
    assert (tmp_path / "a_file").read_text() == "keep me\n", "the file named by --out was overwritten"


def test_export_of_a_folder_that_holds_no_run_is_refused(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    (reports / "empty").mkdir(parents=True)
    code, text = _call(["export", "--run", "empty", "--reports-dir", str(reports)])
    assert code != 0 and "is not a run directory" in text and "Traceback" not in text, text
    assert not (reports / "empty" / "export").exists(), "nothing is written for a folder that is no run"


def test_export_into_a_new_folder_writes_the_four_files(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0, 120.0])
    code, text = _call(["export", "--run", "runA", "--reports-dir", str(reports), "--out", str(tmp_path / "n" / "x")])
    assert code == 0, text
    assert sorted(p.name for p in (tmp_path / "n" / "x").iterdir()) == [
        "adaptive_points.jsonl",
        "adaptive_shapes.jsonl",
        "run_manifest.json",
        "verdicts.jsonl",
    ]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = ("tag", "verdict", "scope", "build", "required_suites", "runs_by_suite", "commands", "coverage",
           "not_required", "counts", "accepted_skips", "figures", "run_id", "suites", "marked_at")  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mark=st.dictionaries(st.sampled_from(_FIELDS), _JSON, max_size=len(_FIELDS)))
def test_a_damaged_release_mark_is_shown_and_listed_without_a_traceback(tmp_path: Path, mark: dict[str, Any]) -> None:
    """Any JSON object as a mark (a hand-edited or damaged file): `release show` describes what it can and names
    the fields of the wrong type; `release list` lists it."""
    text = describe_release(mark)
    assert text.startswith("release "), text
    wrong = [k for k in ("counts", "figures", "commands") if mark.get(k) is not None and not isinstance(mark[k], dict)]
    if wrong:
        assert "damaged: field(s)" in text and all(k in text.splitlines()[-1] for k in wrong), text
    d = tmp_path / "releases"
    d.mkdir(exist_ok=True)
    (d / "t.json").write_text(json.dumps(mark))
    (listed,) = list_releases(tmp_path)
    assert listed["tag"], listed


def test_release_show_of_a_damaged_mark_prints_it_and_names_the_damage(tmp_path: Path) -> None:
    (tmp_path / "releases").mkdir()
    mark = {"tag": "v1", "verdict": "release", "counts": ["passed", 3], "required_suites": "unit", "figures": [1]}
    (tmp_path / "releases" / "v1.json").write_text(json.dumps(mark))
    code, text = _call(["release", "show", "v1", "--reports-dir", str(tmp_path)])
    assert code == 0 and "Traceback" not in text, text
    assert "damaged: field(s) counts, figures, required_suites" in text, text
    code, text = _call(["release", "list", "--reports-dir", str(tmp_path)])
    assert code == 0 and "v1" in text and "damaged" in text, text
    assert os.listdir(tmp_path) == ["releases"], "showing and listing write nothing"


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["runA", "runA"], "refused: runA and runA are both run runA; a comparison needs two runs"),
        (["runA", "runB", "--margin", "nan"], "nan is not a percentage 0-1000"),
        (["runA", "runB", "--margin", "-5"], "-5 is not a percentage 0-1000"),
        (["runA", "runB", "--margin", "inf"], "inf is not a percentage 0-1000"),
        (["runA", "runB", "--margin", "x"], "'x' is not a number"),
    ],
)
def test_compare_refuses_a_run_with_itself_and_a_margin_that_judges_nothing(
    tmp_path: Path, args: list[str], shown: str
) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0, 104.0, 98.0])
    make_run(reports, "runB", [101.0, 103.0, 99.0])
    code, text = _call(["db", "import", str(reports / "runA"), str(reports / "runB"), "--reports-dir", str(reports)])
    assert code == 0, text
    code, text = _call(["compare", *args, "--reports-dir", str(reports)])
    assert code != 0 and shown in text and "Traceback" not in text, f"expected {shown!r}, exit {code}:\n{text}"


def _sqlite(path: Path, *statements: str) -> None:
    import sqlite3

    con = sqlite3.connect(path)
    for st_ in statements:
        con.execute(st_)
    con.commit()
    con.close()


@pytest.mark.parametrize(
    ("kind", "shown"),
    [
        ("damaged", "*the results database *db.sqlite cannot be read as a SQLite database: *"),
        ("foreign", "*holds another application's tables (inventory) and none of pytest-sskj's*"),
        ("newer", "*was written by a newer pytest-sskj (schema revision 0099; this one reads up to 0002)*"),
    ],
)
def test_a_results_database_this_run_cannot_write_is_refused_at_parse_time(
    pytester: pytest.Pytester, kind: str, shown: str
) -> None:
    """Issue 40: a damaged, foreign or newer SQLite file given as --sskj-db was accepted and failed (or was
    migrated over) at the end of the session, after everything was measured."""
    db = pytester.path / "db.sqlite"
    if kind == "damaged":
        db.write_bytes(b"SQLite format 3\x00" + b"\xde\xad" * 2048)
    elif kind == "foreign":
        _sqlite(db, "CREATE TABLE inventory (id INTEGER)")
    else:
        _sqlite(db, "CREATE TABLE runs (run_id TEXT)", "CREATE TABLE alembic_version (version_num TEXT)",
                "INSERT INTO alembic_version VALUES ('0099')")  # fmt: skip
    before = db.read_bytes()
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    res = pytester.runpytest("--sskj-db", str(db), "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, got {res.ret}: {res.stderr.str()[-1500:]}"
    res.stderr.fnmatch_lines([shown, "*accepted: a pytest-sskj results database*", "*Hint: name another file*"])
    assert db.read_bytes() == before, "the refused file is left as it was"


def test_an_empty_file_and_pytest_sskjs_own_database_are_accepted(tmp_path: Path) -> None:
    from pytest_sskj.history.db import ResultsDB
    from pytest_sskj.history.options import sqlite_problem

    (tmp_path / "empty.sqlite").write_bytes(b"")
    assert sqlite_problem(tmp_path / "empty.sqlite") is None, "an empty file is SQLite's new database"
    ResultsDB(f"sqlite:///{tmp_path / 'own.sqlite'}").close()
    assert sqlite_problem(tmp_path / "own.sqlite") is None
    assert sqlite_problem(tmp_path / "absent.sqlite") is None


@pytest.mark.parametrize(
    "argv",
    [
        ["db", "import", "{reports}/empty", "--reports-dir", "{reports}"],
        ["db", "import", "{reports}/a_file", "--reports-dir", "{reports}"],
        ["report", "summary", "--run", "empty", "--reports-dir", "{reports}"],
        ["export", "--run", "empty", "--reports-dir", "{reports}"],
    ],
    ids=["db-import-empty", "db-import-file", "report-summary-empty", "export-empty"],
)
def test_a_folder_that_holds_no_run_is_refused_by_every_subcommand_and_nothing_is_written(
    tmp_path: Path, argv: list[str]
) -> None:
    reports = tmp_path / "reports"
    (reports / "empty").mkdir(parents=True)
    (reports / "a_file").write_text("x\n")
    before = sorted(p.name for p in reports.rglob("*"))
    code, text = _call([a.replace("{reports}", str(reports)) for a in argv])
    assert code != 0 and "is not a run directory" in text and "Traceback" not in text, f"exit {code}:\n{text}"
    assert sorted(p.name for p in reports.rglob("*")) == before, "nothing (no database, no summary) was written"
