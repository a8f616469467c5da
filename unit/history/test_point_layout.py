"""Every point keeps its own layout: ``export`` (``config`` per point, one ``adaptive_shapes`` line per layout x
shape), the ``points`` table's layout columns (migration 0002, back-filled, on SQLite and real PostgreSQL) and
``history --layout``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.acceptance.store import PointStore
from pytest_sskj.history.db import ResultsDB
from pytest_sskj.history.export import export_run
from pytest_sskj.history.importer import import_run
from pytest_sskj.records import new_row
from pytest_sskj.report.results import ResultsWriter
from pytest_sskj.rundir import atomic_write_json
from pytest_sskj.slo import parse_slo

LAYOUTS = [
    {"name": "tp2dp4", "tp": 2, "dp": 4, "ep": 1, "pp": 1},
    {"name": "tp4dp2", "tp": 4, "dp": 2, "ep": 1, "pp": 1},
]
SHAPES = [(1024, 128), (16384, 1)]
PD = {
    "kind": "pd",
    "groups": [
        {"name": "prefill", "role": "prefill", "nodes": ["601"], "tp": 4, "ep": 4, "dp": 1, "pp": 8,
         "backend": "flashinfer_mxfp4", "chunk": 8192},
        {"name": "decode", "role": "decode", "nodes": ["605"], "tp": 32, "ep": 32, "dp": 1, "pp": 1,
         "backend": "marlin", "chunk": None},
    ],
}  # fmt: skip


def _layout_run(reports: Path, run_id: str, **settings: Any) -> Path:
    """A finished run of 2 layouts x 2 shapes x C 16,32 (one repeat), the run's own TP1 (the old export's
    ``config``), written through the real run store."""
    run_dir = reports / run_id
    base: dict[str, Any] = {"engine": "sglang", "backends": ["auto"], "isl": 1024, "osl": 128, "tp": 1, "ep": 1}
    base.update(dp=1, pp=1, layouts=LAYOUTS, shapes=[list(s) for s in SHAPES], slo=["p95_ttft_ms<3000"])
    base.update(settings)
    start = "2026-12-01T10:00:00+0000"
    manifest = {"run_id": run_id, "start_iso": start, "end_iso": start, "status": "finished", "settings": base}
    atomic_write_json(run_dir / "manifest.json", manifest)
    store, writer = PointStore(run_dir), ResultsWriter(run_dir)
    cells = [(None, SHAPES[0])] if base.get("deployment") else [(x["name"], s) for x in LAYOUTS for s in SHAPES]
    for lay, (isl, osl) in cells:
        for c in (16, 32):
            pid = f"{lay or 'pd'}-isl{isl}-osl{osl}-auto-c{c}-r1"
            row = new_row(
                run_id=run_id, test_id=f"acceptance/test_serving.py::test_serving[{pid}]", engine="sglang",
                backend="pd" if lay is None else "auto", chunk=None, concurrency=c, repeat=1, isl=isl, osl=osl,
                layout=lay, deployment="pd: prefill 601..601" if lay is None else None, requests=4, point_id=pid,
                kind="serve", spec_key=str(lay),
            )  # fmt: skip
            tps = 1000.0 * c * (2 if lay == "tp4dp2" else 1)
            row.update(status="passed", completed=4, failed=0, input_throughput=tps, median_ttft_ms=100.0)
            row.update(p95_ttft_ms=150.0 * c / 16, median_tpot_ms=20.0, p95_tpot_ms=25.0)
            store.complete(row, parse_slo("p95_ttft_ms<3000"))
            store.write(pid, row, {})
            writer.add_row(row)
    return run_dir


def test_export_writes_each_points_own_config_and_one_shape_line_per_layout_and_shape(tmp_path: Path) -> None:
    points_path, shapes_path, *_ = export_run(_layout_run(tmp_path / "reports", "lay"))
    points = [json.loads(line) for line in points_path.read_text().splitlines()]
    seen = {(p["layout"], p["config"]) for p in points}
    assert seen == {("tp2dp4", "TP2/EP1/DP4/PP1"), ("tp4dp2", "TP4/EP1/DP2/PP1")}, (
        f"expected each point's own layout, not the run's TP1/EP1/DP1/PP1: {seen}"
    )
    assert all(p["tpot_p50_ms"] == 20.0 and p["tpot_p95_ms"] == 25.0 for p in points)
    sizes = {(p["layout"], p["tp"], p["ep"], p["dp"], p["pp"], p["groups"]) for p in points}
    assert sizes == {("tp2dp4", 2, 1, 4, 1, None), ("tp4dp2", 4, 1, 2, 1, None)}, sizes
    shapes = [json.loads(line) for line in shapes_path.read_text().splitlines()]
    keys = sorted((s["layout"], s["isl"], s["osl"]) for s in shapes)
    assert keys == sorted((x["name"], i, o) for x in LAYOUTS for i, o in SHAPES), keys
    best = {(s["layout"], s["isl"]): s["input_throughput_at_best"] for s in shapes}
    assert best[("tp4dp2", 1024)] == 64000.0 and best[("tp2dp4", 1024)] == 32000.0, best


def test_export_of_a_pd_run_names_the_deployments_groups(tmp_path: Path) -> None:
    points_path, _, manifest, _ = export_run(_layout_run(tmp_path / "r", "pd", layouts=[], deployment=PD))
    points = [json.loads(line) for line in points_path.read_text().splitlines()]
    want = "PD prefill TP4/EP4/DP1/PP8 flashinfer_mxfp4 chunk 8192 + decode TP32/EP32/DP1/PP1 marlin"
    assert {(p["layout"], p["config"]) for p in points} == {("pd", want)}, points[0]
    # each group's role and sizes as separate fields; the run's own sizes are no point's (issue 46)
    assert [(g["role"], g["tp"], g["ep"], g["dp"], g["pp"]) for g in points[0]["groups"]] == [
        ("prefill", 4, 4, 1, 8),
        ("decode", 32, 32, 1, 1),
    ], points[0]["groups"]
    assert (points[0]["tp"], points[0]["ep"], points[0]["dp"], points[0]["pp"]) == (None, None, None, None)
    assert json.loads(manifest.read_text())["config"] == want


def _v1_database(url: str, reports: Path) -> None:
    """A database at revision 0001 holding the layout run (as written before the layout columns existed)."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import MetaData, create_engine

    from pytest_sskj.history import db as dbmod
    from pytest_sskj.history.tables import define_v1

    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(dbmod.__file__).with_name("migrations")))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    runs, points, _, _ = define_v1(MetaData())
    run_dir = _layout_run(reports, "old")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]
    with engine.begin() as conn:
        rec = dbmod.run_record(manifest, run_dir)
        conn.execute(runs.insert().values(**rec))
        for r in rows:
            if r.get("point_id"):
                conn.execute(points.insert().values(run_id="old", point_id=r["point_id"], row=r, metrics={}))
    engine.dispose()


def _urls(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'results.sqlite'}"
    url = str(request.getfixturevalue("postgres_url"))
    name = f"lay{abs(hash(tmp_path)) % 10**8}"
    from sqlalchemy import create_engine, text

    admin = create_engine(url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return url.replace("postgresql://", "postgresql+psycopg://").rsplit("/", 1)[0] + f"/{name}"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_migration_0002_adds_and_backfills_the_layout_columns_and_history_filters_by_layout(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = _urls(request, tmp_path, kind)
    reports = tmp_path / "reports"
    _v1_database(url, reports)
    db = ResultsDB(url)
    assert db.revision() == "0002", f"expected the head revision 0002 after opening, saw {db.revision()}"
    from sqlalchemy import inspect

    indexes = {ix["name"] for ix in inspect(db.engine).get_indexes("points")}
    assert "ix_points_layout" in indexes, f"expected points.layout indexed, saw {indexes}"
    old = {(p["layout"], p["config"], p["tp"], p["dp"]) for p in db.points_of(["old"])}
    assert old == {("tp2dp4", "TP2/EP1/DP4/PP1", 2, 4), ("tp4dp2", "TP4/EP1/DP2/PP1", 4, 2)}, old
    import_run(db, _layout_run(reports, "new"))  # a live write fills the columns too
    new = {(p["layout"], p["config"]) for p in db.points_of(["new"])}
    assert new == {("tp2dp4", "TP2/EP1/DP4/PP1"), ("tp4dp2", "TP4/EP1/DP2/PP1")}, new
    db.close()
    monkeypatch.setenv("SSKJ_DB", url)
    for want in ("tp4dp2", "TP4/EP1/DP2/PP1"):
        assert main(["history", "--reports-dir", str(reports), "--layout", want, "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert len(rows) == 2 * 2 * 2, f"--layout {want}: expected 2 runs x 2 shapes x 2 C, got {len(rows)}"
        assert {(r["layout"], r["config"]) for r in rows} == {("tp4dp2", "TP4/EP1/DP2/PP1")}, rows[0]
    assert main(["history", "--reports-dir", str(reports), "--layout", "tp4dp2", "--shape", "16384/1", "--json"]) == 0
    assert {r["shape"] for r in json.loads(capsys.readouterr().out)} == {"ISL16384/OSL1"}
