"""Result files of a run: ``results.csv``, ``results.json``, ``verdicts.json`` and their journals.

The source of truth is an append-only journal per table (``results.jsonl``, ``verdicts.jsonl``): one
JSON line per row, appended under a file lock (xdist workers share the run directory) and flushed
with ``fsync``.  After every append the full ``results.json`` / ``results.csv`` / ``verdicts.json``
are regenerated from the journal through a temporary file and ``os.replace``, so readers never see
half a file and a crashed run leaves valid files of every row that finished.  :func:`read_results`
and :func:`read_verdicts` tolerate a crashed or damaged run: a truncated last journal line, a
corrupt ``results.json`` or a missing journal fall back to the best remaining source and say so.
Rows use sglang's ``bench_serving`` field names (see ``RESULT_FIELDS``); every value is redacted.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sskj.files import FileRefused, read_text_file
from pytest_sskj.records import LIST_FIELDS, METRIC_FIELDS, ROW_FIELDS, point_key
from pytest_sskj.report.scrub import scrub
from pytest_sskj.rundir import RunLayout, atomic_write_text

__all__ = [
    "METRIC_FIELDS",
    "RESULT_FIELDS",
    "ReadBack",
    "ResultsWriter",
    "point_key",
    "read_results",
    "read_verdicts",
]

RESULT_FIELDS = ROW_FIELDS
"""Column order of ``results.csv``: :data:`pytest_sskj.records.ROW_FIELDS`, then any extra keys, sorted."""
_LIST_FIELDS = LIST_FIELDS


def _lock(path: Path) -> Any:
    from filelock import FileLock

    return FileLock(str(path.with_name(f".{path.name}.lock")), timeout=60)


def _append_line(path: Path, obj: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(obj, sort_keys=True, default=str, allow_nan=False) + "\n"
    with open(path, "ab") as fh:
        if fh.tell() > 0:  # a crashed writer may have left half a line: never glue a row onto it
            with open(path, "rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":
                    line = "\n" + line
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _normalize(row: Mapping[str, Any], secrets: Iterable[str]) -> dict[str, Any]:
    out = dict(row)
    for k in _LIST_FIELDS:
        v = out.get(k)
        out[k] = [] if v is None else list(v) if isinstance(v, (list, tuple)) else [v]
    cleaned: dict[str, Any] = _finite(scrub(out, secrets))
    return cleaned


def _finite(obj: Any) -> Any:
    """NaN and infinities become ``None`` (undefined), so every file stays strict JSON."""
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _csv_text(rows: list[dict[str, Any]]) -> str:
    extras = sorted({k for r in rows for k in r} - set(RESULT_FIELDS))
    fields = [*RESULT_FIELDS, *extras]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_cell(r.get(k)) for k in fields})
    return buf.getvalue()


def _dedupe(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in rows:
        by_key[point_key(r)] = r  # dicts keep first insertion order; the latest row wins
    return list(by_key.values())


@dataclass
class ReadBack:
    """Rows read back from a run directory and what had to be recovered on the way."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    source: str | None = None
    problems: list[str] = field(default_factory=list)


def _read(path: Path, problems: list[str]) -> str | None:
    """The text of one of a run's result files; ``None`` when it is absent, or (noted in ``problems``) when it is
    not a regular file or above the size bound of a file read whole (a FIFO blocked ``export`` before)."""
    try:
        return read_text_file(path, what="result file", errors="replace")
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        problems.append(str(exc))
        return None


def _read_journal(path: Path, problems: list[str]) -> list[dict[str, Any]] | None:
    raw = _read(path, problems)
    if raw is None:
        return None
    rows: list[dict[str, Any]] = []
    for no, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path.name} line {no} is not valid JSON ({exc.msg}); skipped it")
            continue
        if isinstance(obj, dict):
            rows.append(obj)
        else:
            problems.append(f"{path.name} line {no} is not a JSON object; skipped it")
    return rows


def _read_json_list(path: Path, problems: list[str]) -> list[dict[str, Any]] | None:
    text = _read(path, problems)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        problems.append(f"{path.name} is corrupt or truncated ({exc.msg} at char {exc.pos})")
        return None
    items = data.get("rows", data.get("verdicts")) if isinstance(data, dict) else data
    if not isinstance(items, list):
        problems.append(f"{path.name} holds no list of rows")
        return None
    return [r for r in items if isinstance(r, dict)]


def _from_csv_cell(name: str, text: str) -> Any:
    if text == "":
        return [] if name in _LIST_FIELDS else None
    if name in _LIST_FIELDS or text[:1] in "[{":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    if text in ("true", "false"):
        return text == "true"
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _read_csv(path: Path, problems: list[str]) -> list[dict[str, Any]] | None:
    text = _read(path, problems)
    if text is None:
        return None
    rows: list[dict[str, Any]] = []
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    for no, rec in enumerate(reader, 2):
        if None in rec or any(v is None for v in rec.values()):
            problems.append(
                f"{path.name} line {no} has {len([v for v in rec.values() if v is not None])} of "
                f"{len(header)} columns; skipped it"
            )
            continue
        rows.append({k: _from_csv_cell(k, v) for k, v in rec.items()})
    return rows


def read_results(run_dir: Path) -> ReadBack:
    """Rows of ``run_dir``: from the journal, else ``results.json``, else ``results.csv``; never raises on
    damaged files (what was skipped or recovered is listed in ``problems``)."""
    out = ReadBack()
    layout = RunLayout(run_dir)
    for path, reader in (
        (layout.results_journal, _read_journal),
        (layout.results_json, _read_json_list),
        (layout.results_csv, _read_csv),
    ):
        name = path.name
        rows = reader(path, out.problems)
        if rows is not None:
            out.rows, out.source = _dedupe(rows), name
            if out.problems:
                out.problems.append(f"recovered {len(out.rows)} row(s) from {name}")
            return out
    out.problems.append(f"no results.jsonl, results.json or results.csv in {run_dir}")
    return out


def read_verdicts(run_dir: Path) -> ReadBack:
    """Verdicts of ``run_dir`` from ``verdicts.jsonl``, else ``verdicts.json`` (damage tolerated)."""
    out = ReadBack()
    layout = RunLayout(run_dir)
    for path, reader in ((layout.verdicts_journal, _read_journal), (layout.verdicts_json, _read_json_list)):
        name = path.name
        rows = reader(path, out.problems)
        if rows is not None:
            # a resumed run judges a verdict again: the latest record of each (kind, id) wins
            latest: dict[tuple[str, str], dict[str, Any]] = {}
            for i, v in enumerate(rows):
                key = (str(v.get("kind")), str(v.get("id"))) if v.get("id") is not None else ("", str(i))
                latest[key] = v
            out.rows, out.source = list(latest.values()), name
            return out
    return out


class ResultsWriter:
    """Appends result rows and verdicts of one run directory; safe across xdist workers."""

    def __init__(self, run_dir: Path, *, secrets: Iterable[str] = ()) -> None:
        self.run_dir = Path(run_dir)
        self.secrets = tuple(secrets)
        self.layout = RunLayout(self.run_dir)
        self.results_json = self.layout.results_json
        self.results_csv = self.layout.results_csv
        self.verdicts_json = self.layout.verdicts_json

    def add_row(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Record one point/repeat row (redacted) and rewrite ``results.json``/``results.csv``."""
        clean = _normalize(row, self.secrets)
        journal = self.layout.results_journal
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with _lock(journal):
            _append_line(journal, clean)
            self._rewrite_results()
        return clean

    def add_verdict(self, verdict: Mapping[str, Any]) -> dict[str, Any]:
        """Record one verdict (redacted) and rewrite ``verdicts.json``."""
        clean: dict[str, Any] = _finite(scrub(dict(verdict), self.secrets))
        journal = self.layout.verdicts_journal
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with _lock(journal):
            _append_line(journal, clean)
            rows = read_verdicts(self.run_dir).rows
            atomic_write_text(
                self.verdicts_json, json.dumps({"verdicts": rows}, indent=2, sort_keys=True, default=str) + "\n"
            )
        return clean

    def _rewrite_results(self) -> None:
        rows = read_results(self.run_dir).rows
        atomic_write_text(self.results_json, json.dumps({"rows": rows}, indent=2, sort_keys=True, default=str) + "\n")
        atomic_write_text(self.results_csv, _csv_text(rows))

    def rows(self) -> list[dict[str, Any]]:
        return read_results(self.run_dir).rows

    def verdicts(self) -> list[dict[str, Any]]:
        return read_verdicts(self.run_dir).rows
