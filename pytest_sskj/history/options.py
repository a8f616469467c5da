"""The option rows the history subsystem owns: the results database, the baseline, the regression margin and
the dry run.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sskj.options.row import Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry
    from pytest_sskj.settings import Settings

__all__ = ["HISTORY", "register"]

HISTORY: tuple[Option, ...] = (
    # --- results history ------------------------------------------------------------------------
    Option(
        "db",
        ("--sskj-db",),
        "db",
        "Results database every point, verdict and run is also written to: a SQLAlchemy URL "
        "(postgresql://user:pass@host/db, sqlite:///path) or a file path (default: <reports dir>/results.sqlite; "
        "'none' disables); the password never reaches a report",
        metavar="URL",
    ),
    Option(
        "baseline_ref",
        ("--sskj-baseline",),
        "ref",
        "Judge every point against this earlier run's matching point: a release tag, a run id or last-release "
        "(a regression beyond the baseline's repeat spread plus --sskj-regression-margin fails)",
        metavar="REF",
    ),
    Option(
        "regression_margin_pct",
        ("--sskj-regression-margin",),
        "float",
        "Percent a point may be worse than its baseline on top of the baseline's own repeat spread (default 5)",
        default=5.0,
        lo=0,
        hi=1000,
        unit="%",
    ),
    Option(
        "dry_run",
        ("--sskj-dry-run",),
        "bool",
        "Print the test matrix and every node's command; launch nothing",
        default=False,
    ),
)
"""The results database, the baseline and the dry run."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``) and
    the check of an existing SQLite results file."""
    registry.add_options(*HISTORY)
    registry.add_check(check_db_file)


_OWN_TABLES = frozenset({"runs", "points", "verdicts", "tags"})


def _sqlite_path(s: Settings) -> Path | None:
    from pytest_sskj.history.urls import DEFAULT_NAME

    text = (s.db or "").strip()
    if not text:
        return s.reports_dir / DEFAULT_NAME
    if text.lower() == "none" or ("://" in text and not text.lower().startswith("sqlite:///")):
        return None
    return Path(text.split(":///", 1)[1]) if "://" in text else Path(text).expanduser()


def sqlite_problem(path: Path) -> str | None:
    """Why the SQLite file at ``path`` cannot be this run's results database, read-only and without migrating: not
    a database or damaged, another application's tables, or a schema revision newer than this code; ``None`` when
    it is absent, empty (SQLite's new database) or pytest-sskj's own."""
    import sqlite3
    from urllib.parse import quote

    from pytest_sskj.history.tables import SCHEMA_REVISION, VERSION_TABLE

    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, timeout=5)
        try:
            tables = {str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            query = "SELECT version_num FROM alembic_version"  # tables.VERSION_TABLE
            revs = [str(r[0]) for r in con.execute(query)] if VERSION_TABLE in tables else []
        finally:
            con.close()
    except sqlite3.Error as exc:
        return f"cannot be read as a SQLite database: {exc}"
    newer = [r for r in revs if not (r.isdigit() and int(r) <= int(SCHEMA_REVISION))]
    if newer:
        return (f"was written by a newer pytest-sskj (schema revision {newer[0]}; this one reads up to "
                f"{SCHEMA_REVISION})")  # fmt: skip
    if tables and not revs and not tables & _OWN_TABLES:
        shown = ", ".join(sorted(tables)[:5])
        return f"holds another application's tables ({shown}) and none of pytest-sskj's (runs, points, verdicts, tags)"
    return None


def check_db_file(s: Settings, opts: Mapping[str, Option]) -> None:
    """``--sskj-db`` (or the default file) that exists but cannot be written by this run: refused at parse time,
    before anything is measured, instead of at the end of the session."""
    path = _sqlite_path(s)
    problem = sqlite_problem(path) if path is not None else None
    if problem and path is not None:
        from pytest_sskj.validate import usage

        raise usage(
            f"{opts['db'].display}: the results database {path} {problem}",
            "a pytest-sskj results database (SQLite or postgresql://), a new file, or none",
            f"name another file (--sskj-db {path.parent / 'results-new.sqlite'}) or --sskj-db none; "
            "the file itself is left as it is",
        )
