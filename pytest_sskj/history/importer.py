"""``python -m pytest_sskj db import RUN_DIR...``: back-fill (or retry) the database from run directories.

Everything comes from the run store's files (manifest, result rows with their samples, verdicts) and the
release marks that name the run; writing is idempotent (a run imported twice holds the same rows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.acceptance.store import PointStore
from pytest_sskj.files import read_json_file
from pytest_sskj.history.db import ResultsDB, run_record
from pytest_sskj.report.results import read_results, read_verdicts
from pytest_sskj.rundir import RunLayout

__all__ = ["Imported", "import_run", "read_manifest", "release_marks"]


@dataclass
class Imported:
    """What one run directory contributed."""

    run_id: str
    points: int = 0
    verdicts: int = 0
    tags: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """``manifest.json`` of ``run_dir``; ``{}`` when missing or unreadable."""
    try:
        data = read_json_file(RunLayout(run_dir).manifest, what="the run's manifest")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def release_marks(reports_dir: Path) -> list[dict[str, Any]]:
    """Every readable release mark under ``reports_dir/releases`` (``tag``, ``run_ids``, ``marked_at``)."""
    out = []
    for path in sorted((reports_dir / "releases").glob("*.json")):
        try:
            d = read_json_file(path, what="release mark")
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict):
            continue
        runs = d.get("run_id")
        ids = [str(r) for r in runs] if isinstance(runs, list) else [str(runs)]
        figures = str(d.get("figures_run") or ids[0])
        out.append({"tag": str(d.get("tag") or path.stem), "run_ids": ids, "figures_run": figures, **d})
    return sorted(out, key=lambda m: str(m.get("marked_at") or ""))


def import_run(db: ResultsDB, run_dir: Path) -> Imported:
    """Write one run directory into ``db`` (run, points with samples, verdicts, release tags)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    run_id = str(manifest.get("run_id") or run_dir.name)
    manifest.setdefault("run_id", run_id)
    got = Imported(run_id)
    if not manifest.get("settings"):
        got.problems.append(f"{run_dir}: no readable manifest.json; run facts are missing")
    db.put_run(run_record(manifest, run_dir.resolve()))
    results = read_results(run_dir)
    got.problems += [p for p in results.problems if not p.startswith("no results.jsonl")]
    store = PointStore(run_dir)
    for row in results.rows:
        found = store.read(str(row.get("point_id"))) if row.get("point_id") else None
        db.put_point(run_id, row, found[1] if found else {})
        got.points += 1
    for v in read_verdicts(run_dir).rows:
        db.put_verdict(run_id, v)
        got.verdicts += 1
    for mark in release_marks(run_dir.parent):
        if run_id in mark["run_ids"]:
            db.put_tag(mark["tag"], run_id, mark.get("marked_at"))
            got.tags.append(mark["tag"])
    return got
