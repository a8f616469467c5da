"""The per-run point store: ``<run dir>/points/<point id>/`` holds each point's result as it is produced.

Each finished point writes ``result.json`` (the contract's result row plus a few acceptance keys) and
``samples.json`` (per-request TTFT / E2E / TPOT samples in ms, which the bootstrap comparison needs)
atomically, so an interrupted run keeps every finished point on disk.  ``--resume <run id>`` reuses the
run directory; :meth:`PointStore.finished` reads a point back and the runner does not repeat it.  The
adaptive search keeps its steps in ``<run dir>/search/<config>/steps.jsonl`` (:class:`StepLog`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_sskj.files import read_json_file
from pytest_sskj.rundir import RunLayout, atomic_write_json, jsonable

__all__ = ["MEASURED_FAILURES", "PointStore", "StepLog", "atomic_write_json", "jsonable"]

MEASURED_FAILURES = frozenset({"oracle", "config"})
"""Failure categories of a point that was fully measured (requests failed the oracle, the config drifted).

Other failures (crash, OOM, NCCL, hang, launch, bench client) and ``not_run`` rows are measured again on
``--resume``: the interruption, not the configuration, may be what they record."""


def _read_json(path: Path) -> Any | None:
    try:
        return read_json_file(path)
    except (OSError, ValueError):  # missing, not a regular file, corrupt: nothing to resume from
        return None


class PointStore:
    """Results of one run's points under ``<run dir>/points/``."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.layout = RunLayout(run_dir)
        self.root = self.layout.points

    def point_dir(self, point_id: str) -> Path:
        d = self.layout.point(point_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def complete(self, row: dict[str, Any], gates: Sequence[Any]) -> dict[str, Any]:
        """Fill the store's columns of a finished ``row`` in place: ``request_file`` (relative to the run
        directory, ``None`` when the bench wrote none) and ``slo_met`` (gate -> met / missed / ``None`` not
        judged; empty for a row without metrics)."""
        from pytest_sskj.acceptance.search import judge

        pid = str(row.get("point_id"))
        req = self.layout.request_file(pid)
        row["request_file"] = str(req.relative_to(self.run_dir)) if req.is_file() else None
        measured = row.get("completed") is not None
        results = judge(gates, row, osl=int(row.get("osl") or 0))[1] if measured else []
        row["slo_met"] = {str(r.gate): r.passed for r in results}
        return row

    def write(self, point_id: str, row: Mapping[str, Any], samples: Mapping[str, Sequence[float]]) -> Path:
        """Store one point's row and samples; samples first, so a row on disk always has its samples."""
        self.point_dir(point_id)
        atomic_write_json(self.layout.point_samples(point_id), {k: list(v) for k, v in samples.items()})
        return atomic_write_json(self.layout.point_result(point_id), row)

    def reset(self, point_id: str) -> None:
        """Remove every file of ``point_id`` but its lock: a point measured again (``--resume`` of an
        interrupted or broken point) replaces the old attempt's rows, samples and request records."""
        d = self.root / point_id
        if not d.is_dir():
            return
        for p in d.rglob("*"):
            if p.is_file() and p.name != ".lock":
                p.unlink(missing_ok=True)

    def read(self, point_id: str) -> tuple[dict[str, Any], dict[str, list[float]]] | None:
        """The stored row and samples of ``point_id``; ``None`` when absent or unreadable."""
        row = _read_json(self.layout.point_result(point_id))
        if not isinstance(row, dict):
            return None
        samples = _read_json(self.layout.point_samples(point_id))
        return row, ({str(k): [float(x) for x in v] for k, v in samples.items()} if isinstance(samples, dict) else {})

    def finished(self, point_id: str) -> tuple[dict[str, Any], dict[str, list[float]]] | None:
        """A stored point that was measured and need not be repeated on ``--resume``."""
        found = self.read(point_id)
        if found is None:
            return None
        row = found[0]
        if row.get("status") == "passed" or (
            row.get("status") == "failed" and row.get("category") in MEASURED_FAILURES
        ):
            return found
        return None

    def ids(self) -> list[str]:
        """Ids of every point with a stored row."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "result.json").is_file())


class StepLog:
    """The steps of one adaptive concurrency search, appended as they are measured (JSON lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        """Every complete step line; a torn last line (interrupted write) is ignored."""
        if not self.path.is_file():
            return []
        steps: list[dict[str, Any]] = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                steps.append(obj)
        return steps

    def append(self, step: Mapping[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(jsonable(step), sort_keys=True) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
