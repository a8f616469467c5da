"""The history plugin: the results database written live, and the ``--sskj-baseline`` gate's session state.

Every ``pytest_sskj_point_finished`` / ``pytest_sskj_verdict`` is written to the database *after* the
reporter wrote the files (``trylast``); the run record at session start and again at the end (with the
final manifest).  A database that cannot be reached or written is a warning with the retry command, never
a failed test: the first failure switches the database off for the rest of the session, and the terminal
summary says what was not written.  Bad ``--sskj-db`` / ``--sskj-baseline`` values are usage errors at
configure time, before anything is launched.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

__all__ = ["HISTORY_KEY", "BaselineGate", "HistoryRecorder", "sskj_baseline"]

_log = logging.getLogger(__name__)
HISTORY_KEY = pytest.StashKey["HistoryRecorder"]()
RECORDER = "sskj-history"


@dataclass
class BaselineGate:
    """The resolved baseline of this session (``None`` fields when no ``--sskj-baseline`` was given)."""

    baseline: Any = None
    margin_pct: float = 5.0
    waivers: list[Any] = field(default_factory=list)
    today: _dt.date = field(default_factory=_dt.date.today)


class HistoryRecorder:
    """One per pytest process (xdist workers write the points they measure)."""

    def __init__(self, config: pytest.Config, settings: Settings, url: str | None) -> None:
        from pytest_sskj.report.scrub import secret_values

        self.config = config
        self.settings = settings
        self.url = url
        self.is_worker = hasattr(config, "workerinput")
        self.secrets = (*secret_values(settings.env), *self._url_password())
        self.db: Any = None
        self.outage: str | None = None
        self.written = 0
        self.skipped = 0
        self.gate = BaselineGate(margin_pct=settings.regression_margin_pct)
        from pytest_sskj.recording import records

        self.off = settings.dry_run or not records(config)
        """Nothing is written: a dry run, or a session that records no run (:mod:`pytest_sskj.recording`)."""

    def _url_password(self) -> tuple[str, ...]:
        if not self.url or self.url.startswith("sqlite"):  # a file URL has no password (and needs no parser)
            return ()
        from sqlalchemy.engine import make_url

        pw = make_url(self.url).password
        return (str(pw),) if pw else ()

    @property
    def display(self) -> str:
        from pytest_sskj.history.urls import display_url

        return display_url(self.url) if self.url else "none"

    def retry_command(self) -> str:
        cmd = f"python -m pytest_sskj db import {self.settings.run_dir_display}"
        src = self.settings.sources.get("db")
        if src == "cli":
            cmd += " with SSKJ_DB=<the --sskj-db URL>" if self._url_password() else f" --db '{self.display}'"
        elif src in ("env", "ini"):
            cmd += " (with the same SSKJ_DB / sskj_db)"
        return cmd

    def _write(self, what: str, fn: Callable[[Any], None]) -> None:
        if self.url is None or self.off:
            return
        if self.outage is not None:
            self.skipped += 1
            return
        try:
            if self.db is None:
                from pytest_sskj.history.db import ResultsDB

                self.db = ResultsDB(self.url)
            fn(self.db)
            self.written += 1
        except Exception as exc:  # an outage must never fail the run: the files hold everything
            from pytest_sskj.redact import redact_text

            self.skipped += 1
            self.outage = redact_text(f"{type(exc).__name__}: {exc}", self.secrets).splitlines()[0][:300]
            if type(exc).__name__ == "CorruptDatabase" and EXTRA_KEY in self.config.stash:
                self.config.stash[EXTRA_KEY].setdefault("write_error", self.outage)  # the manifest says error
            failed = self.config.stash[EXTRA_KEY].get("write_error") if EXTRA_KEY in self.config.stash else None
            files = f"the run's files are incomplete too ({failed})" if failed else "the run's files hold every result"
            _log.warning(
                "pytest-sskj: results database %s not written (%s: %s); %s; retry: %s",
                self.display,
                what,
                self.outage,
                files,
                self.retry_command(),
            )

    def _scrub(self, obj: dict[str, Any]) -> dict[str, Any]:
        from pytest_sskj.report.scrub import scrub

        out: dict[str, Any] = scrub(obj, self.secrets)
        return out

    def _put_run(self) -> None:
        from pytest_sskj.history.db import run_record
        from pytest_sskj.history.importer import read_manifest

        manifest = self._scrub(read_manifest(self.settings.run_dir))
        if manifest:
            self._write("run", lambda db: db.put_run(run_record(manifest, self.settings.run_dir.resolve())))

    # -- hooks -------------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sskj_point_finished(self, config: pytest.Config, result: dict[str, Any]) -> None:
        from pytest_sskj.acceptance.store import PointStore

        row = self._scrub(dict(result))
        found = PointStore(self.settings.run_dir).read(str(row.get("point_id"))) if row.get("point_id") else None
        samples = found[1] if found else {}
        self._write("point", lambda db: db.put_point(self.settings.run_id, row, samples))

    @pytest.hookimpl(trylast=True)
    def pytest_sskj_verdict(self, config: pytest.Config, verdict: dict[str, Any]) -> None:
        clean = self._scrub(dict(verdict))
        self._write("verdict", lambda db: db.put_verdict(self.settings.run_id, clean))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not self.is_worker:
            self._put_run()

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Without ``--sskj-baseline`` the baseline gate is deselected (not skipped: a release needs no skip)."""
        if self.gate.baseline is not None:
            return
        gated = [it for it in items if "sskj_baseline_config" in getattr(getattr(it, "callspec", None), "params", {})]
        if gated:
            from pytest_sskj.stash import NOT_APPLICABLE_KEY

            na = config.stash.setdefault(NOT_APPLICABLE_KEY, {})
            for it in gated:
                na[it.nodeid] = "no --sskj-baseline given: the baseline regression gate does not apply"
            config.hook.pytest_deselected(items=gated)
            items[:] = [it for it in items if it not in gated]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or self.url is None or self.off:
            return
        if self.outage is not None:
            terminalreporter.write_line(
                f"sskj: WARNING results database {self.display} not written ({self.outage}); "
                f"{self.skipped} record(s) are only in the run's files; retry: {self.retry_command()}",
                yellow=True,
            )
        else:
            terminalreporter.write_line(f"sskj: results database {self.display} ({self.written} record(s) written)")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The run's headline medians into ``--alluredir`` (Allure 3 trends them across runs)."""
        alluredir = getattr(self.config.option, "allure_report_dir", None)
        if self.is_worker or not alluredir or self.off:
            return
        from pytest_sskj.history.importer import read_manifest
        from pytest_sskj.report.allure import write_performance
        from pytest_sskj.report.results import read_results

        rows = read_results(self.settings.run_dir).rows
        m = read_manifest(self.settings.run_dir)
        start = float(m.get("start_time") or 0.0)
        try:
            write_performance(
                Path(alluredir),
                rows,
                run_id=self.settings.run_id,
                baseline=self.settings.baseline,
                start=start,
                stop=time.time(),
            )
        except OSError as exc:
            _log.warning("pytest-sskj: could not write the Allure performance file: %s", exc)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if not self.is_worker:
            self._put_run()  # the finished manifest (status, end time, engine facts)
        if self.db is not None:
            self.db.close()


def _resolve_gate(config: pytest.Config, settings: Settings, rec: HistoryRecorder) -> None:
    from pytest_sskj.history import gate as g
    from pytest_sskj.history.db import ResultsDB

    ref = settings.baseline_ref
    if not ref:
        return
    db = None
    if rec.url is not None:
        try:
            db = ResultsDB(rec.url)
        except Exception as exc:  # the files may still hold the baseline
            _log.warning("pytest-sskj: results database %s not readable for the baseline: %s", rec.display, exc)
    try:
        base = g.resolve_baseline(ref, settings.reports_dir, db)
    except g.BaselineError as exc:
        raise pytest.UsageError(f"{exc}\n  Hint: a release tag (release list), a run id or last-release") from None
    finally:
        if db is not None:
            db.close()
    current = g.env_facts({"settings": settings.as_dict()})
    why = g.refusals(current, base)
    if why:
        raise pytest.UsageError(
            f"--sskj-baseline {ref}: {base.named} is not comparable with this run: "
            + "; ".join(why)
            + "\n  accepted: a baseline of the same shape, engine, model, platform, parallel layout and endpoint"
            + "\n  Hint: pick a baseline from `python -m pytest_sskj history` with the same shape"
        )
    from pytest_sskj.report.release import find_config

    cfg = find_config(Path(str(config.rootpath)))
    try:
        waivers = g.load_waivers(g.read_toml(cfg), str(cfg)) if cfg else []
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    rec.gate = BaselineGate(base, settings.regression_margin_pct, waivers)


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or config.pluginmanager.has_plugin(RECORDER):
        return
    from pytest_sskj.history.urls import resolve_url

    try:
        url = resolve_url(settings.db, settings.reports_dir)
    except ValueError as exc:
        raise pytest.UsageError(
            f"--sskj-db: {exc}\n  accepted: postgresql://user:pass@host:port/db, sqlite:///path, a file path, none"
            f"\n  Hint: --sskj-db postgresql://sskj@db.example:5432/sskj (password from SSKJ_DB, never logged)"
        ) from None
    if url is not None and url.startswith("postgresql") and importlib.util.find_spec("psycopg") is None:
        raise pytest.UsageError(
            "--sskj-db: a PostgreSQL URL needs psycopg 3, which is not installed\n"
            "  accepted: postgresql://... with psycopg installed, sqlite:///path, a file path, none\n"
            "  Hint: pip install 'pytest-sskj[postgres]'"
        )
    rec = HistoryRecorder(config, settings, url)
    _resolve_gate(config, settings, rec)
    config.stash[HISTORY_KEY] = rec
    config.pluginmanager.register(rec, RECORDER)


@pytest.fixture(scope="session")
def sskj_baseline(pytestconfig: pytest.Config) -> BaselineGate:
    """The ``--sskj-baseline`` gate of this session (``.baseline`` is ``None`` without one)."""
    rec = pytestconfig.stash.get(HISTORY_KEY, None)
    return rec.gate if rec is not None else BaselineGate()
