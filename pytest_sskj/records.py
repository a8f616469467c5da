"""The one schema of a result row and of a verdict record (versioned), used by every reader and writer.

A **row** is one serving point and one repeat (the unit of replication is the repeat): the runner builds
it with :func:`new_row`, the run store persists it (``points/``, ``results.*``), the summaries, medians
table, plots, Allure and the results database read it.  Columns, in ``results.csv`` order:

- identity (:data:`IDENTITY_FIELDS`): ``run_id, test_id, engine, backend, chunk, concurrency, repeat, isl,
  osl, requests, point_id, kind`` (``serve`` or ``search``), ``spec_key``;
- outcome (:data:`OUTCOME_FIELDS`): ``status`` (passed | failed | not_run), ``category`` (crash, oom, nccl,
  timeout, launch, bench, config, oracle or None), ``reasons``, ``findings``, ``client_bound``, ``wall_s``,
  ``request_file`` (the per-request JSONL, relative to the run directory), ``slo_met`` (gate text ->
  True/False/None: met, missed, not judged), ``measured_concurrency``;
- metrics (:data:`METRIC_FIELDS`): the metric vocabulary (:mod:`pytest_sskj.vocabulary`: sglang
  ``bench_serving`` names with units in the name), ``None`` when undefined (never 0);
- ``schema_version`` (:data:`ROW_SCHEMA`).

A **verdict** (:func:`verdict_record`) always has ``kind, id, run_id, test_id, passed, message`` plus its
kind's keys (see :mod:`pytest_sskj.report.summary`) and ``schema_version`` (:data:`VERDICT_SCHEMA`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_sskj.vocabulary import METRICS

__all__ = [
    "IDENTITY_FIELDS",
    "LIST_FIELDS",
    "METRIC_FIELDS",
    "OUTCOME_FIELDS",
    "POINT_KEY_FIELDS",
    "ROW_FIELDS",
    "ROW_SCHEMA",
    "VERDICT_FIELDS",
    "VERDICT_SCHEMA",
    "new_row",
    "point_key",
    "verdict_record",
]

ROW_SCHEMA = "sskj-row/2"
VERDICT_SCHEMA = "sskj-verdict/1"

IDENTITY_FIELDS = (
    "run_id",
    "test_id",
    "engine",
    "backend",
    "chunk",
    "concurrency",
    "repeat",
    "isl",
    "osl",
    "layout",
    "deployment",
    "requests",
    "point_id",
    "kind",
    "spec_key",
)
"""What a row is about; the measurement never overwrites these (``BenchResult.metrics`` has ``concurrency``)."""

OUTCOME_FIELDS = (
    "status",
    "category",
    "reasons",
    "findings",
    "client_bound",
    "wall_s",
    "request_file",
    "slo_met",
    "measured_concurrency",
)
METRIC_FIELDS = (*(name for name in METRICS if name not in IDENTITY_FIELDS), "metrics_version")
"""The metric columns: every metric of :data:`pytest_sskj.vocabulary.METRICS` (the bench's achieved
``concurrency`` is the row's ``measured_concurrency``: ``concurrency`` is the configured one)."""
ROW_FIELDS = (*IDENTITY_FIELDS, *OUTCOME_FIELDS, *METRIC_FIELDS, "schema_version")
"""Every column of a row, in ``results.csv`` order (extra keys follow, sorted)."""

LIST_FIELDS = ("reasons", "findings")
POINT_KEY_FIELDS = ("test_id", "backend", "chunk", "concurrency", "repeat")

VERDICT_FIELDS = ("kind", "id", "run_id", "test_id", "passed", "message", "schema_version")


def new_row(**identity: Any) -> dict[str, Any]:
    """A row with every :data:`ROW_FIELDS` column (``status`` ``not_run``, lists empty, the rest ``None``)
    and the identity given; unknown identity keys are refused (a typo would silently split a point)."""
    unknown = set(identity) - set(IDENTITY_FIELDS)
    if unknown:
        raise TypeError(f"not identity fields of a row: {sorted(unknown)} (known: {', '.join(IDENTITY_FIELDS)})")
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(identity, status="not_run", reasons=[], findings=[], slo_met={}, schema_version=ROW_SCHEMA)
    return row


def point_key(row: Mapping[str, Any]) -> tuple[str, ...]:
    """Identity of a row inside a run: (test id, backend, chunk, concurrency, repeat); a later row replaces
    an earlier one of the same key."""
    return tuple(str(row.get(k)) for k in POINT_KEY_FIELDS)


def verdict_record(verdict: Mapping[str, Any], *, run_id: str | None = None) -> dict[str, Any]:
    """``verdict`` with every :data:`VERDICT_FIELDS` key present and the schema version stamped."""
    out: dict[str, Any] = dict.fromkeys(VERDICT_FIELDS)
    out.update(verdict)
    if out.get("run_id") is None:
        out["run_id"] = run_id
    out["schema_version"] = VERDICT_SCHEMA
    return out
