"""The results database on SQLite (no server): schema migrations, idempotent import, history, compare, the
users' export, URL handling and redaction."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.history.db import ResultsDB, display_url, resolve_url
from pytest_sskj.history.export import POINT_FIELDS, export_run
from pytest_sskj.history.importer import import_run
from pytest_sskj.history.query import Filters, history_rows
from unit.history.conftest import make_run


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'reports' / 'results.sqlite'}"


def test_opening_a_new_database_migrates_it_to_the_head_revision(tmp_path: Path) -> None:
    db = ResultsDB(_sqlite(tmp_path))
    assert db.revision() == "0002", f"expected schema revision 0002 after opening, saw {db.revision()}"
    with sqlite3.connect(tmp_path / "reports" / "results.sqlite") as conn:
        names = {r[0] for r in conn.execute("select name from sqlite_master where type='table'")}
    assert {"runs", "points", "verdicts", "tags", "alembic_version"} <= names, f"tables seen: {sorted(names)}"
    ResultsDB(_sqlite(tmp_path))  # opening again is a no-op at head


def test_opening_a_database_at_head_does_not_import_alembic_and_an_older_one_is_migrated(tmp_path: Path) -> None:
    """Every session opens the database: at head a plain query of the version table decides (alembic's import
    alone costs ~0.12 s of the session), and a database stamped with an older revision still migrates."""
    import subprocess
    import sys

    url = _sqlite(tmp_path)
    ResultsDB(url).close()
    code = (
        f"import sys; from pytest_sskj.history.db import ResultsDB; ResultsDB({url!r}); print('alembic' in sys.modules)"
    )
    seen = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert seen == "False", f"expected no alembic import when the database is at head, saw imported={seen}"
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    import pytest_sskj.history.db as dbmod

    old_url = _sqlite(tmp_path / "old")
    (tmp_path / "old" / "reports").mkdir(parents=True)
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(dbmod.__file__).with_name("migrations")))
    engine = create_engine(old_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    engine.dispose()
    db = ResultsDB(old_url)
    assert db.revision() == "0002", f"expected the 0001 database migrated to 0002, saw {db.revision()}"


def test_db_import_is_idempotent_and_keeps_samples(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "reports", "runA", [100.0, 110.0, 90.0])
    db = ResultsDB(_sqlite(tmp_path))
    first = import_run(db, run_dir)
    second = import_run(db, run_dir)
    assert (first.points, first.verdicts) == (3, 1) == (second.points, second.verdicts)
    pts = db.points_of(["runA"])
    assert len(pts) == 3, f"expected 3 stored points after importing twice, saw {len(pts)}"
    assert all(p["samples"]["ttft_ms"] for p in pts), "expected per-request samples stored with every point"
    assert pts[0]["request_file"] is None and pts[0]["metrics"]["input_throughput"] in (100.0, 110.0, 90.0)
    assert len(db.verdicts_of("runA")) == 1
    assert [r["run_id"] for r in db.runs()] == ["runA"]


def test_history_filters_by_shape_backend_date_and_tag(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    a = make_run(reports, "runA", [100.0], started="2026-11-01T10:00:00+0000")
    b = make_run(reports, "runB", [100.0], isl=1024, backend="serial", started="2026-11-20T10:00:00+0000")
    (reports / "releases").mkdir()
    (reports / "releases" / "v1.3.json").write_text(json.dumps({"tag": "v1.3", "run_id": "runA", "marked_at": "x"}))
    db = ResultsDB(_sqlite(tmp_path))
    got = import_run(db, a)
    import_run(db, b)
    assert got.tags == ["v1.3"], f"expected the release mark naming runA imported as a tag, saw {got.tags}"
    assert {r["run_id"] for r in history_rows(db, Filters())} == {"runA", "runB"}
    assert [r["run_id"] for r in history_rows(db, Filters(shape="1024/16"))] == ["runB"]
    assert [r["run_id"] for r in history_rows(db, Filters(shape="ISL512/OSL16"))] == ["runA"]
    assert [r["run_id"] for r in history_rows(db, Filters(backend="serial"))] == ["runB"]
    assert [r["run_id"] for r in history_rows(db, Filters(since="2026-11-10"))] == ["runB"]
    assert [r["run_id"] for r in history_rows(db, Filters(tag="v1.3"))] == ["runA"]
    assert history_rows(db, Filters(engine="sglang")) == []


def test_cli_import_history_and_compare_print_both_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0, 104.0, 98.0], ttft_ms=[100.0, 102.0, 99.0])
    make_run(reports, "runB", [50.0, 52.0, 49.0], ttft_ms=[200.0, 204.0, 198.0])
    assert main(["db", "import", str(reports / "runA"), str(reports / "runB"), "--reports-dir", str(reports)]) == 0
    assert capsys.readouterr().out.startswith("imported runA: 3 point(s), 1 verdict(s) -> sqlite:///")
    assert main(["history", "--reports-dir", str(reports), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["run_id"], r["repeat"]) for r in rows} == {(f"run{x}", i) for x in "AB" for i in (1, 2, 3)}
    assert main(["history", "--reports-dir", str(reports), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("run_id,started_at,tags,platform")
    assert main(["compare", "runA", "runB", "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert "Input TPS" in out and "−50." in out, f"expected a -50 % Input TPS delta, saw:\n{out}"
    assert "no between-run noise known yet" in out and "| worse" not in out, out
    make_run(reports, "run0", [100.0, 103.0, 99.0], ttft_ms=[100.0, 101.0, 99.0])  # two stored runs of one code:
    make_run(reports, "run1", [101.0, 99.0, 102.0], ttft_ms=[99.0, 100.0, 101.0])  # the between-run A/A pair
    assert main(["compare", "runA", "runB", "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert "worse" in out and "1 stored A/A run pair(s)" in out.splitlines()[-1], out
    assert out.splitlines()[-1].startswith("compare runA -> runB: 1 configuration(s): 0 better, 1 worse"), out
    assert main(["compare", "runA", "runB", "--reports-dir", str(reports), "--fail-on", "worse"]) == 1
    assert "worse beyond the between-run noise" in capsys.readouterr().err


def test_compare_of_unrelated_runs_says_so_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0, 104.0, 98.0])
    make_run(reports, "runB", [100.0, 104.0, 98.0], backend="serial")
    assert main(["db", "import", str(reports / "runA"), str(reports / "runB"), "--reports-dir", str(reports)]) == 0
    assert main(["compare", "runA", "runB", "--reports-dir", str(reports)]) == 1
    assert "no configuration in common (unrelated runs)" in capsys.readouterr().err


def test_compare_refuses_runs_of_another_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0])
    make_run(reports, "runB", [100.0], isl=2048)
    for r in ("runA", "runB"):
        main(["db", "import", str(reports / r), "--reports-dir", str(reports)])
    capsys.readouterr()
    assert main(["compare", "runA", "runB", "--reports-dir", str(reports)]) == 1
    cap = capsys.readouterr()
    assert "INCOMPARABLE: shape ISL 512 / OSL 16 in runA, ISL 2048 / OSL 16 in runB" in cap.out, cap.out
    assert "refused" in cap.err
    assert main(["compare", "runA", "nope", "--reports-dir", str(reports)]) == 2
    assert "no release tag or run id 'nope'" in capsys.readouterr().err


def test_database_urls_are_resolved_and_shown_without_password(tmp_path: Path) -> None:
    assert resolve_url(None, tmp_path) == f"sqlite:///{(tmp_path / 'results.sqlite').resolve()}"
    assert resolve_url("none", tmp_path) is None
    assert resolve_url(str(tmp_path / "x.db"), tmp_path) == f"sqlite:///{tmp_path / 'x.db'}"
    pg = resolve_url("postgresql://ann:s3cret@db.example:5432/sskj", tmp_path)
    assert pg == "postgresql+psycopg://ann:s3cret@db.example:5432/sskj"
    assert "s3cret" not in display_url(pg) and "ann:***REDACTED***@db.example" in display_url(pg)
    with pytest.raises(ValueError, match="'mysql' is not supported"):
        resolve_url("mysql://u:p@h/d", tmp_path)


def test_export_writes_the_users_jsonl_shapes(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "reports", "runA", [100.0, 120.0])
    paths = export_run(run_dir)
    names = [p.name for p in paths]
    assert names == ["adaptive_points.jsonl", "adaptive_shapes.jsonl", "run_manifest.json", "verdicts.jsonl"], names
    points = [json.loads(line) for line in paths[0].read_text().splitlines()]
    assert len(points) == 2 and list(points[0]) == list(POINT_FIELDS)
    assert points[0]["slo_met"] is True and points[0]["slo"] == {"p95_ttft_ms<30000": True}
    assert points[0]["tpot_p95_ms"] is None, "an undefined metric is null, never 0"
    shapes = [json.loads(line) for line in paths[1].read_text().splitlines()]
    assert len(shapes) == 1 and shapes[0]["best_concurrency"] == 8 and shapes[0]["input_throughput_at_best"] == 110.0
    assert json.loads(paths[2].read_text())["run_id"] == "runA"


def test_a_release_mark_is_recorded_as_a_tag_the_baseline_can_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_sskj.history.cli import record_release
    from pytest_sskj.history.gate import resolve_baseline

    reports = tmp_path / "reports"
    run_dir = make_run(reports, "runA", [100.0, 101.0])
    db = ResultsDB(_sqlite(tmp_path))
    import_run(db, run_dir)
    (reports / "releases").mkdir()
    (reports / "releases" / "v2.0.json").write_text(json.dumps({"tag": "v2.0", "run_id": ["runA"], "marked_at": "t"}))
    monkeypatch.delenv("SSKJ_DB", raising=False)
    assert record_release(reports, "v2.0") == f"tag v2.0 recorded in sqlite:///{reports / 'results.sqlite'}"
    assert db.tagged("v2.0") == ["runA"] and db.last_release() == "v2.0"
    (reports / "releases" / "v2.0.json").unlink()  # another machine: only the database knows the tag
    base = resolve_baseline("v2.0", tmp_path / "elsewhere", db)
    assert (base.run_id, base.label, len(base.rows)) == ("runA", "release v2.0", 2)
    assert resolve_baseline("last-release", tmp_path / "elsewhere", db).run_id == "runA"


def test_history_with_no_matching_point_says_so_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: ``history --shape foo`` printed nothing useful and exited 0."""
    from pytest_sskj.__main__ import main
    from pytest_sskj.history.db import ResultsDB

    ResultsDB(f"sqlite:///{tmp_path / 'r.sqlite'}").close()  # an empty, migrated database
    monkeypatch.setenv("SSKJ_DB", str(tmp_path / "r.sqlite"))
    rc = main(["history", "--shape", "foo"])
    assert rc == 1 and "no stored point matches --shape foo" in capsys.readouterr().err


def test_baseline_lookup_order_last_release_with_nothing_and_the_error_naming_the_database(tmp_path: Path) -> None:
    """resolve_baseline: files first unless prefer_db; last-release with no mark anywhere says where it looked;
    an unknown ref names the database when one is open."""
    from pytest_sskj.history.gate import BaselineError, resolve_baseline

    reports = tmp_path / "reports"
    run_dir = make_run(reports, "runA", [100.0, 101.0])
    db = ResultsDB(_sqlite(tmp_path))
    import_run(db, run_dir)
    assert resolve_baseline("runA", reports, db).source == f"run directory {run_dir}"
    assert resolve_baseline("runA", reports, db, prefer_db=True).source == f"database {db.display}"
    only_files = make_run(reports, "runB", [90.0])
    assert resolve_baseline("runB", reports, db, prefer_db=True).source == f"run directory {only_files}"
    assert resolve_baseline("runA", tmp_path / "elsewhere", db).source == f"database {db.display}"
    for database in (None, db):
        with pytest.raises(BaselineError) as exc:
            resolve_baseline("last-release", reports, database)
        assert str(exc.value) == f"--sskj-baseline last-release: no release mark in {reports / 'releases'}"
    with pytest.raises(BaselineError) as exc:
        resolve_baseline("v9", reports, db)
    assert str(exc.value) == (
        f"--sskj-baseline v9: no release tag or run id 'v9' in {reports} or the database "
        "(release tags: none; latest runs: runB, runA)"
    ), str(exc.value)
