"""The results database: SQLite under the reports dir by default, or a team PostgreSQL (``--sskj-db``).

SQLAlchemy Core for both dialects, Alembic for the schema version (:mod:`pytest_sskj.history.tables`,
migrations under ``migrations/``); every ``put_*`` replaces what the database held for the same key in one
transaction, so writing a run twice (live, then ``db import``) is idempotent.  URLs are shown only through
:func:`display_url` (password redacted).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pytest_sskj.history import tables as t
from pytest_sskj.history.urls import DEFAULT_NAME, display_url, resolve_url
from pytest_sskj.records import METRIC_FIELDS
from pytest_sskj.rundir import jsonable

__all__ = ["DEFAULT_NAME", "CorruptDatabase", "ResultsDB", "display_url", "resolve_url", "run_record"]


def _num(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def run_record(manifest: Mapping[str, Any], run_dir: Path | None = None) -> dict[str, Any]:
    """The ``runs`` row of a run from its (already redacted) manifest."""
    s = manifest.get("settings") if isinstance(manifest.get("settings"), Mapping) else {}
    assert isinstance(s, Mapping)
    layout = "/".join(f"{k.upper()}{s.get(k)}" for k in ("tp", "ep", "dp", "pp") if s.get(k) is not None)
    isl, osl = _num(s.get("isl")), _num(s.get("osl"))
    return {
        "run_id": str(manifest.get("run_id")),
        "started_at": manifest.get("start_iso"),
        "ended_at": manifest.get("end_iso"),
        "status": manifest.get("status"),
        "platform": s.get("platform"),
        "model": s.get("model_name") or s.get("model_path"),
        "engine": s.get("engine"),
        "backends": list(s.get("backends") or []),
        "layout": layout or None,
        "shape": f"ISL{isl}/OSL{osl}" if isl is not None else None,
        "isl": isl,
        "osl": osl,
        "engine_facts": jsonable(manifest.get("engine") or {}),
        "manifest": jsonable(manifest),
        "run_dir": str(run_dir) if run_dir is not None else None,
        "schema_version": t.SCHEMA_REVISION,
    }


def _point_values(
    run_id: str, row: Mapping[str, Any], samples: Mapping[str, Sequence[float]], settings: Mapping[str, Any]
) -> dict[str, Any]:
    from pytest_sskj.history.layout import point_layout

    clean = jsonable(row)
    return {
        **point_layout(clean, settings),  # the point's own layout (history/layout.py), not the run's
        "run_id": run_id,
        "point_id": str(row.get("point_id") or "/".join(str(row.get(k)) for k in ("backend", "chunk", "concurrency"))),
        **{k: clean.get(k) for k in ("test_id", "engine", "backend", "kind", "spec_key", "status", "category")},
        **{k: _num(row.get(k)) for k in ("chunk", "concurrency", "repeat", "isl", "osl", "requests")},
        "client_bound": row.get("client_bound") if isinstance(row.get("client_bound"), bool) else None,
        "request_file": clean.get("request_file"),
        "input_throughput": clean.get("input_throughput"),
        "slo_met": clean.get("slo_met") or {},
        "metrics": {k: clean.get(k) for k in METRIC_FIELDS},
        "samples": jsonable({k: list(v) for k, v in samples.items()}),
        "row": clean,
        "schema_version": clean.get("schema_version"),
    }


class CorruptDatabase(RuntimeError):
    """The results database fails its check before the first write (``PRAGMA quick_check``)."""


class ResultsDB:
    """One results database; opening it brings its schema to the head revision."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import create_engine

        self.url = url
        self.display = display_url(url)
        if url.startswith("sqlite"):
            path = url.split(":///", 1)[1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(url, connect_args={"timeout": 30})
        else:
            self.engine = create_engine(url, connect_args={"connect_timeout": 5}, pool_pre_ping=True)
        self.check()
        self._migrate()

    def check(self) -> None:
        """Before the first write: SQLite's ``PRAGMA quick_check`` (a malformed page is refused, not written
        over), PostgreSQL a trivial query.  Raises :class:`CorruptDatabase` with the first problem."""
        from sqlalchemy import text
        from sqlalchemy.exc import DatabaseError

        try:
            with self.engine.connect() as conn:
                if self.url.startswith("sqlite"):
                    rows = [str(r[0]) for r in conn.execute(text("PRAGMA quick_check"))]
                    if rows != ["ok"]:
                        raise CorruptDatabase(f"{self.display} fails PRAGMA quick_check: {'; '.join(rows)[:200]}")
                else:
                    conn.execute(text("SELECT 1")).scalar()
        except DatabaseError as exc:
            first = str(exc.orig if exc.orig is not None else exc).splitlines()[0][:200]
            raise CorruptDatabase(f"{self.display} cannot be read: {first}") from None

    def _migrate(self) -> None:
        if self._stamped_head():
            return
        from alembic import command  # imported only to migrate: alembic's import alone is ~0.12 s
        from alembic.config import Config

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).with_name("migrations")))
        with self._migration_lock(), self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def _stamped_head(self) -> bool:
        """Whether alembic's version table names exactly the head revision (read with a plain query)."""
        from sqlalchemy import Column, MetaData, String, Table, select
        from sqlalchemy.exc import DBAPIError

        version = Table(t.VERSION_TABLE, MetaData(), Column("version_num", String(32)))
        try:
            with self.engine.connect() as conn:
                found = [str(r[0]) for r in conn.execute(select(version.c.version_num))]
        except DBAPIError:  # no version table yet: a new database
            return False
        return found == [t.SCHEMA_REVISION]

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        """xdist workers and parallel sessions open the same SQLite file: one migrates at a time."""
        if not self.url.startswith("sqlite:///") or self.url.endswith(":memory:"):
            yield
            return
        from filelock import FileLock

        with FileLock(self.url.split(":///", 1)[1] + ".migrate.lock", timeout=120):
            yield

    def close(self) -> None:
        self.engine.dispose()

    def revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            rev: str | None = MigrationContext.configure(conn).get_current_revision()
            return rev

    # -- writes ----------------------------------------------------------------------------------
    def put_run(self, record: Mapping[str, Any]) -> None:
        with self.engine.begin() as conn:
            conn.execute(t.runs.delete().where(t.runs.c.run_id == record["run_id"]))
            conn.execute(t.runs.insert().values(**record))

    def put_point(self, run_id: str, row: Mapping[str, Any], samples: Mapping[str, Sequence[float]]) -> None:
        from sqlalchemy import select

        with self.engine.begin() as conn:
            manifest = conn.execute(select(t.runs.c.manifest).where(t.runs.c.run_id == run_id)).scalar()
            settings = manifest.get("settings") if isinstance(manifest, dict) else None
            values = _point_values(run_id, row, samples, settings if isinstance(settings, dict) else {})
            c = t.points.c
            conn.execute(t.points.delete().where(c.run_id == run_id, c.point_id == values["point_id"]))
            conn.execute(t.points.insert().values(**values))

    def put_verdict(self, run_id: str, verdict: Mapping[str, Any]) -> None:
        clean = jsonable(verdict)
        vid = str(clean.get("id") or clean.get("test_id") or "")
        kind = str(clean.get("kind") or "?")
        passed = clean.get("passed")
        with self.engine.begin() as conn:
            c = t.verdicts.c
            conn.execute(t.verdicts.delete().where(c.run_id == run_id, c.kind == kind, c.verdict_id == vid))
            conn.execute(
                t.verdicts.insert().values(
                    run_id=run_id,
                    kind=kind,
                    verdict_id=vid,
                    test_id=clean.get("test_id"),
                    passed=passed if isinstance(passed, bool) else None,
                    message=clean.get("message"),
                    record=clean,
                )
            )

    def put_tag(self, tag: str, run_id: str, marked_at: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(t.tags.delete().where(t.tags.c.tag == tag, t.tags.c.run_id == run_id))
            conn.execute(t.tags.insert().values(tag=tag, run_id=run_id, marked_at=marked_at))

    # -- reads -----------------------------------------------------------------------------------
    def runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first, with its ``tags``."""
        from sqlalchemy import select

        with self.engine.connect() as conn:
            out = [dict(r._mapping) for r in conn.execute(select(t.runs).order_by(t.runs.c.started_at))]
            tag_rows = conn.execute(select(t.tags).order_by(t.tags.c.marked_at)).all()
        by_run: dict[str, list[str]] = {}
        for tr in tag_rows:
            by_run.setdefault(tr.run_id, []).append(tr.tag)
        for r in out:
            r["tags"] = by_run.get(r["run_id"], [])
        return out

    def points_of(self, run_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Every stored point of ``run_ids`` (row dicts with ``metrics``, ``samples`` and ``row``)."""
        from sqlalchemy import select

        c = t.points.c
        q = select(t.points).where(c.run_id.in_(list(run_ids))).order_by(c.run_id, c.point_id)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(q)]

    def verdicts_of(self, run_id: str) -> list[dict[str, Any]]:
        from sqlalchemy import select

        with self.engine.connect() as conn:
            q = select(t.verdicts.c.record).where(t.verdicts.c.run_id == run_id)
            return [dict(r.record) for r in conn.execute(q)]

    def tagged(self, tag: str) -> list[str]:
        """Run ids marked with release ``tag`` (several when a release judged more than one session)."""
        from sqlalchemy import select

        with self.engine.connect() as conn:
            return [r.run_id for r in conn.execute(select(t.tags.c.run_id).where(t.tags.c.tag == tag))]

    def last_release(self) -> str | None:
        from sqlalchemy import select

        q = select(t.tags.c.tag).order_by(t.tags.c.marked_at.desc()).limit(1)
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return str(row.tag) if row is not None else None
