"""The results database's tables (SQLAlchemy Core), one definition per schema version.

Schema v1 (Alembic revision ``0001``):

- ``runs``: one row per run id with its manifest facts (platform, model, engine, layout, shape, status,
  times, engine facts, the redacted manifest);
- ``points``: one row per (run, point id) — a serving point and repeat — with the row's identity columns
  for filtering, ``metrics`` (every metric column of :data:`pytest_sskj.records.METRIC_FIELDS`),
  ``samples`` (per-request TTFT/E2E/TPOT ms, for repeat-level comparisons) and the whole ``row``;
- ``verdicts``: one row per (run, kind, id);
- ``tags``: release tags -> run ids (``release mark`` files imported with their run).

Schema v2 (revision ``0002``) adds the layout of every point to ``points`` (:mod:`pytest_sskj.history.layout`):
``layout`` (the layout's name, the deployment kind, or null for a run's one setting), ``config``
(``TP4/EP1/DP2/PP1``, or every group of a deployment), ``tp``/``ep``/``dp``/``pp`` and ``deployment``.

Values that vary with the metric vocabulary live in JSON columns, so a new metric needs no migration.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Boolean, Column, Float, Integer, MetaData, String, Table, Text

__all__ = [
    "SCHEMA_REVISION",
    "VERSION_TABLE",
    "define_v1",
    "define_v2",
    "layout_columns",
    "metadata",
    "points",
    "runs",
    "tags",
    "verdicts",
]

SCHEMA_REVISION = "0002"
"""The Alembic head revision the code reads and writes."""

VERSION_TABLE = "alembic_version"
"""Alembic's table of the applied revision (its default name; the migrations keep it)."""


def define_v1(md: MetaData) -> tuple[Table, Table, Table, Table]:
    """The v1 tables on ``md`` (migration ``0001`` creates exactly these)."""
    return _runs_v1(md), _points_v1(md), _verdicts_v1(md), _tags_v1(md)


def layout_columns() -> list[Column[Any]]:
    """The ``points`` columns revision ``0002`` adds (new objects on every call: a Column has one table)."""
    return [
        Column("layout", String(128), index=True),
        Column("config", String(512)),
        Column("tp", Integer),
        Column("ep", Integer),
        Column("dp", Integer),
        Column("pp", Integer),
        Column("deployment", Text),
    ]


def define_v2(md: MetaData) -> tuple[Table, Table, Table, Table]:
    """The v2 tables on ``md``: v1 with the layout columns on ``points``."""
    return _runs_v1(md), _points_v1(md, layout_columns()), _verdicts_v1(md), _tags_v1(md)


def _runs_v1(md: MetaData) -> Table:
    return Table(
        "runs",
        md,
        Column("run_id", String(128), primary_key=True),
        Column("started_at", String(40), index=True),
        Column("ended_at", String(40)),
        Column("status", String(40)),
        Column("platform", String(128), index=True),
        Column("model", String(256), index=True),
        Column("engine", String(40), index=True),
        Column("backends", JSON),
        Column("layout", String(128)),
        Column("shape", String(128)),
        Column("isl", Integer),
        Column("osl", Integer),
        Column("engine_facts", JSON),
        Column("manifest", JSON),
        Column("run_dir", Text),
        Column("schema_version", String(40)),
    )


def _points_v1(md: MetaData, extra: list[Column[Any]] | None = None) -> Table:
    return Table(
        "points",
        md,
        Column("run_id", String(128), primary_key=True),
        Column("point_id", String(256), primary_key=True),
        Column("test_id", Text),
        Column("engine", String(40)),
        Column("backend", String(128), index=True),
        Column("chunk", Integer),
        Column("concurrency", Integer),
        Column("repeat", Integer),
        Column("isl", Integer),
        Column("osl", Integer),
        Column("requests", Integer),
        Column("kind", String(40)),
        Column("spec_key", Text),
        Column("status", String(40)),
        Column("category", String(40)),
        Column("client_bound", Boolean),
        Column("request_file", Text),
        Column("input_throughput", Float),
        Column("slo_met", JSON),
        Column("metrics", JSON),
        Column("samples", JSON),
        Column("row", JSON),
        Column("schema_version", String(40)),
        *(extra or []),
    )


def _verdicts_v1(md: MetaData) -> Table:
    return Table(
        "verdicts",
        md,
        Column("run_id", String(128), primary_key=True),
        Column("kind", String(40), primary_key=True),
        Column("verdict_id", String(256), primary_key=True),
        Column("test_id", Text),
        Column("passed", Boolean),
        Column("message", Text),
        Column("record", JSON),
    )


def _tags_v1(md: MetaData) -> Table:
    return Table(
        "tags",
        md,
        Column("tag", String(128), primary_key=True),
        Column("run_id", String(128), primary_key=True),
        Column("marked_at", String(40)),
    )


metadata = MetaData()
runs, points, verdicts, tags = define_v2(metadata)
