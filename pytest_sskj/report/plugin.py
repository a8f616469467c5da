"""The reporter plugin: result files, ``summary.md``, plots, Allure extras, test outcomes, manifest facts.

Imported by :mod:`pytest_sskj.plugin` at ``pytest_configure`` time; its ``pytest_configure`` builds one
:class:`Reporter` per process and registers it.  The reporter only coordinates; the work lives in
:mod:`~pytest_sskj.report.results` (rows and verdicts, lock-protected so xdist workers that emit
``pytest_sskj_point_finished`` / ``pytest_sskj_verdict`` share the files), :mod:`~pytest_sskj.report.summary`,
:mod:`~pytest_sskj.report.plots`, :mod:`~pytest_sskj.report.allure_env` and
:mod:`~pytest_sskj.report.outcomes`.  Controller-only duties: Allure's ``environment.properties`` /
``categories.json`` / ``executor.json`` in ``--alluredir``, ``outcomes.json``, the final summary with
plots, and the manifest's ``report`` fact.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sskj.files import read_json_file
from pytest_sskj.report import allure as sskj_allure
from pytest_sskj.report.outcomes import MARKERS_ATTR, OutcomeRecorder
from pytest_sskj.report.results import ResultsWriter, read_results, read_verdicts
from pytest_sskj.report.scrub import scrub, settings_secrets
from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, MANIFEST_KEY, SETTINGS_KEY

if TYPE_CHECKING:
    from pytest_sskj.report.plot_drawing import PlotDrawing

__all__ = ["Reporter", "regenerate"]

_log = logging.getLogger(__name__)
REPORTER = "sskj-reporter"


def _manifest_data(run_dir: Path) -> dict[str, Any]:
    try:
        data = read_json_file(run_dir / "manifest.json", what="the run's manifest")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def regenerate(
    run_dir: Path,
    *,
    plots: bool,
    baseline: str | None = None,
    backends: tuple[str, ...] = (),
    slo: tuple[str, ...] = (),
    drawing: PlotDrawing | None = None,
) -> dict[str, Any]:
    """Rewrite ``summary.md`` (and, with ``plots``, every PNG) from the files of ``run_dir``; also used by
    ``python -m pytest_sskj report summary`` on a crashed run.  Returns what was written.

    The plots are drawn by child processes (:func:`pytest_sskj.report.plot_drawing.draw_plots`); ``drawing``: one
    already started from the same files (the reporter starts it as the terminal summary begins), waited for."""
    from pytest_sskj.report.summary import render_summary, write_medians
    from pytest_sskj.rundir import atomic_write_text

    results = read_results(run_dir)
    verdicts = read_verdicts(run_dir)
    manifest = _manifest_data(run_dir)
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    assert isinstance(settings, dict)
    slo = slo or tuple(str(s) for s in settings.get("slo") or ())
    backends = backends or tuple(str(b) for b in settings.get("backends") or ())
    written: list[Path] = []
    if plots:
        from pytest_sskj.report.plot_drawing import draw_plots

        written = (drawing or draw_plots(run_dir, results.rows, verdicts.rows, slo)).wait()
    else:
        written = sorted((run_dir / "plots").glob("*.png"))
    problems = [p for p in [*results.problems, *verdicts.problems] if not p.startswith("no results.jsonl")]
    text = render_summary(
        results.rows, verdicts.rows, manifest=manifest, baseline=baseline, plots=written, problems=problems
    )
    atomic_write_text(run_dir / "summary.md", text)
    write_medians(run_dir, results.rows, baseline or (backends[0] if backends else None))
    return {
        "summary": "summary.md",
        "rows": len(results.rows),
        "verdicts": len(verdicts.rows),
        "plots": [str(p.relative_to(run_dir)) for p in written],
        "problems": problems,
    }


def _collection_by_suite(items: list[pytest.Item], deselected: set[str]) -> dict[str, list[str]]:
    """Per suite, the node ids the run found: its collected items plus every deselected one (a release judges
    several runs of a suite together against the union of what they ran: report/release_cover.py)."""
    from pytest_sskj.report.outcomes import suite_of

    out: dict[str, set[str]] = {}
    for nodeid in (*(it.nodeid for it in items), *deselected):
        out.setdefault(suite_of(nodeid), set()).add(nodeid)
    return {k: sorted(v) for k, v in out.items()}


def _collected_by_suite(items: list[pytest.Item]) -> dict[str, int]:
    from pytest_sskj.report.outcomes import suite_of

    collected: dict[str, int] = {}
    for it in items:
        collected[suite_of(it.nodeid)] = collected.get(suite_of(it.nodeid), 0) + 1
    return collected


class Reporter:
    """One per pytest process; controller-only work is skipped on xdist workers."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self.secrets = settings_secrets(settings)
        self.writer = ResultsWriter(settings.run_dir, secrets=self.secrets)
        markers = {str(line).split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
        markers |= {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings", "timeout"}
        self.outcomes = OutcomeRecorder(settings.run_dir, settings.run_id, frozenset(markers), self.secrets)
        self.finished = False
        """Whether the end-of-session reports were written (at the terminal summary, or at session finish)."""
        self._deselected_ids: set[str] = set()
        self._drawing: PlotDrawing | None = None
        """The session's plots being drawn by child processes, from the start of the terminal summary on."""

    @property
    def alluredir(self) -> Path | None:
        d = getattr(self.config.option, "allure_report_dir", None)
        return Path(d) if d else None

    @property
    def enabled(self) -> bool:
        """Off in a dry run and in a session that records no run (:mod:`pytest_sskj.recording`)."""
        from pytest_sskj.recording import records

        return not self.settings.dry_run and records(self.config)

    # -- result rows and verdicts (any process) ------------------------------------------------------
    @pytest.hookimpl
    def pytest_sskj_point_finished(self, config: pytest.Config, result: dict[str, Any]) -> None:
        if not self.enabled:
            return
        row = self.writer.add_row(result)
        sskj_allure.attach_json(
            f"result row {row.get('backend')} chunk {row.get('chunk')} C={row.get('concurrency')} r{row.get('repeat')}",
            row,
        )
        self._summary(plots=False)

    @pytest.hookimpl
    def pytest_sskj_verdict(self, config: pytest.Config, verdict: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = self.writer.add_verdict(verdict)
        sskj_allure.attach_json(f"verdict {clean.get('kind', '')}".strip(), clean)
        self._attach_verdict_plot(clean)
        self._summary(plots=False)

    def _attach_verdict_plot(self, verdict: Mapping[str, Any]) -> None:
        """Draw the plot a verdict is about into ``plots/`` and attach it to the running test -- only when Allure
        records this session: ``plots/`` is drawn in full at the session's end anyway (a crashed run's with
        ``report summary``), and drawing each verdict's plot twice cost 2-3 s of a 60 s default run."""
        if not sskj_allure.active():
            return
        from pytest_sskj.report import plots

        kind = verdict.get("kind")
        out = self.settings.run_dir / "plots"
        path: Path | None = None
        try:
            if kind == "search":
                n = len([v for v in self.writer.verdicts() if v.get("kind") == "search"]) - 1
                path = plots.plot_search(
                    verdict, out / plots.search_plot_name(max(n, 0), verdict), [str(g) for g in self.settings.slo]
                )
            elif kind == "chunk_curve":
                path = plots.plot_chunk_curve(verdict, out / plots.chunk_curve_plot_name(verdict), self.writer.rows())
            elif kind == "comparison":
                path = plots.plot_ttft_vs_concurrency(self.writer.rows(), out / "ttft_vs_concurrency.png")
        except Exception as exc:  # a plot must never fail the test it illustrates
            _log.warning("pytest-sskj: could not draw the %s plot: %s", kind, exc)
            return
        if path is not None:
            sskj_allure.attach_file(path)

    def _summary(self, *, plots: bool) -> dict[str, Any] | None:
        drawing = self._drawing if plots else None  # the plots started at the terminal summary (start_plots)
        if plots:
            self._drawing = None
        try:
            return regenerate(
                self.settings.run_dir,
                plots=plots,
                baseline=self.settings.baseline,
                backends=self.settings.backends,
                slo=tuple(str(g) for g in self.settings.slo),
                drawing=drawing,
            )
        except Exception as exc:  # reporting problems are reported, they do not fail tests
            _log.warning("pytest-sskj: could not regenerate %s/summary.md: %s", self.settings.run_dir, exc)
            return None
        finally:
            if drawing is not None:
                drawing.close()  # waited for already, unless regenerate failed first

    def start_plots(self) -> None:
        """Start drawing the session's plots in child processes, on the cores the finished benchmarks left idle,
        while the other plugins write their terminal summaries; :meth:`_finish` waits for them."""
        if self.is_worker or not self.enabled or self.finished or self._drawing is not None or self._interrupted():
            return
        from pytest_sskj.report.plot_drawing import draw_plots

        run_dir = self.settings.run_dir
        try:
            rows, verdicts = read_results(run_dir).rows, read_verdicts(run_dir).rows
            self._drawing = draw_plots(run_dir, rows, verdicts, tuple(str(g) for g in self.settings.slo))
        except Exception as exc:  # regenerate draws them itself then
            _log.warning("pytest-sskj: could not start drawing the plots of %s: %s", run_dir, exc)

    # -- controller only ---------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.is_worker or not self.enabled:
            return
        self._record_invocation()
        self.settings.run_dir.mkdir(parents=True, exist_ok=True)
        self._scrub_manifest()
        self._write_allure_extras()

    def _scrub_manifest(self) -> None:
        """The manifest records settings such as ``ssh_identity``: redact them before anything else reads it."""
        manifest = self.config.stash.get(MANIFEST_KEY, None)
        if manifest is not None:
            manifest.data = scrub(manifest.data, self.secrets)
            manifest.write()

    def _write_allure_extras(self) -> None:
        if self.alluredir is None:
            return
        from pytest_sskj.report.allure_env import write_allure_extras

        manifest = self.config.stash.get(MANIFEST_KEY, None)
        data = manifest.data if manifest is not None else _manifest_data(self.settings.run_dir)
        write_allure_extras(self.alluredir, data)

    @pytest.hookimpl
    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Count deselected tests per suite (``-k``, ``-m``, ``--deselect``, ``--lf``): a release needs zero."""
        from pytest_sskj.report.outcomes import suite_of
        from pytest_sskj.stash import NOT_APPLICABLE_KEY

        not_applicable = self.config.stash.get(NOT_APPLICABLE_KEY, {})
        counts = self.outcomes.selection.setdefault("deselected", {})
        listed = self.outcomes.selection.setdefault("not_applicable", {})
        self._deselected_ids.update(it.nodeid for it in items)
        for it in items:
            if it.nodeid in not_applicable:  # the plugin's own "does not apply" deselection, listed instead
                listed[it.nodeid] = not_applicable[it.nodeid]
                continue
            counts[suite_of(it.nodeid)] = counts.get(suite_of(it.nodeid), 0) + 1

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the exact selection of this run in ``outcomes.json`` (release marking judges it)."""
        if self.is_worker:
            self._send_selection(session)
            return
        if not self.enabled:
            return
        self._record_invocation()
        self.outcomes.selection.update(
            collected=_collected_by_suite(session.items),
            collection=_collection_by_suite(session.items, self._deselected_ids),
        )
        self.outcomes.selection.setdefault("deselected", {})
        self.outcomes.selection.setdefault("not_applicable", {})

    def _record_invocation(self) -> None:
        """What the command line selected (args, paths, -k, -m, ...): recorded at session start too, since an
        xdist controller never collects (its workers report the collection, :meth:`pytest_testnodedown`)."""
        from pytest_sskj.report.scrub import scrub_text

        opt = self.config.option
        self.outcomes.selection.update(
            args=[scrub_text(str(a), self.secrets) for a in self.config.invocation_params.args],
            rootdir=str(self.config.rootpath),
            paths=[str(a) for a in (getattr(opt, "file_or_dir", None) or [])],
            keyword=str(getattr(opt, "keyword", "") or ""),
            markexpr=str(getattr(opt, "markexpr", "") or ""),
            deselect=[str(x) for x in (getattr(opt, "deselect", None) or [])],
            ignore=[
                str(x) for x in (*(getattr(opt, "ignore", None) or []), *(getattr(opt, "ignore_glob", None) or []))
            ],
            lf=bool(getattr(opt, "lf", False)),
            maxfail=int(getattr(opt, "maxfail", 0) or 0),
            xdist=bool(self.config.pluginmanager.hasplugin("dsession")),
        )

    def _send_selection(self, session: pytest.Session) -> None:
        """On an xdist worker: what it collected and deselected, for the controller (which collects nothing
        itself: a deselection made at collection -- a conftest's, the plugin's own -- happens only here)."""
        out = getattr(self.config, "workeroutput", None)
        if out is None:
            return
        sel = self.outcomes.selection
        out["sskj_selection"] = {
            "collected": _collected_by_suite(session.items),
            "collection": _collection_by_suite(session.items, self._deselected_ids),
            "deselected": dict(sel.get("deselected") or {}),
            "not_applicable": dict(sel.get("not_applicable") or {}),
        }

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: take the collection and deselections a worker reported (every worker collects the
        same tests, so the first report is the run's) into ``outcomes.json``."""
        got = getattr(node, "workeroutput", {}).get("sskj_selection")
        sel = self.outcomes.selection
        if not got or sel.get("worker_collection"):
            return
        sel["worker_collection"] = True
        sel["collected"] = dict(got.get("collected") or {})
        if got.get("collection") is not None:
            sel["collection"] = dict(got["collection"])
        sel["deselected"] = dict(got.get("deselected") or {})
        sel.setdefault("not_applicable", {}).update(got.get("not_applicable") or {})

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Stamp the item's marker names on its reports (workers included) for ``outcomes.json``."""
        report = yield
        setattr(report, MARKERS_ATTR, sorted({m.name for m in item.iter_markers()}))
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker or not self.enabled:
            return
        self.outcomes.record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        """Write outcomes, ``summary.md`` and the plots before pytest's final line (the foundation completed
        the manifest first, so the summary shows the final status), and say so on the terminal.  Last of the
        terminal summaries: the plots, started as the first (:class:`_PlotStarter`), draw during the others."""
        if self.is_worker or not self.enabled or self.finished:
            return
        if (self.settings.run_dir / "results.csv").is_file():  # plots take seconds: say what is happening
            if self._interrupted():
                terminalreporter.write_line(
                    f"sskj: interrupted: writing summary.md to {self.settings.run_dir_display}; plots skipped "
                    f"(draw them later: python -m pytest_sskj report summary --run {self.settings.run_dir.name})"
                )
            else:
                terminalreporter.write_line(
                    f"sskj: writing summary.md and plots to {self.settings.run_dir_display} ..."
                )
        self._finish(int(exitstatus))

    def _record_session(self) -> None:
        """The manifest's ``session``: deselections with their reasons and the terminal's overhead line (the
        acceptance plugin computes both, for the terminal too), which ``summary.md`` shows with the counts."""
        manifest = self.config.stash.get(MANIFEST_KEY, None)
        if manifest is None:
            return
        from pytest_sskj.acceptance.plugin import session_deselections, session_overhead

        try:
            rows = read_results(self.settings.run_dir).rows
            deselected, why = session_deselections(self.config)
            overhead = session_overhead(self.config, rows) if rows else None
            manifest.update(session={"deselected": deselected, "deselections": why, "overhead": overhead})
        except Exception as exc:  # reporting problems are reported, they do not fail tests
            _log.warning("pytest-sskj: could not record the session's counts in the manifest: %s", exc)

    def _interrupted(self) -> bool:
        """A signal ended the session: nothing but what is on disk is wanted, quickly (plots take seconds)."""
        from pytest_sskj.interrupts import received

        return received(self.config) is not None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
        """The outermost wrapper: without a terminal summary (``-p no:terminal``) its second half writes the
        reports after the foundation completed the manifest."""
        try:
            yield
        finally:
            if not self.is_worker and self.enabled and not self.finished:
                self._finish(int(session.exitstatus))

    def _finish(self, exitstatus: int) -> None:
        self.finished = True
        if self._interrupted() and self._drawing is not None:
            self._drawing.close()  # a signal came after the plots were started: the user wants out
            self._drawing = None
        self.outcomes.write(complete=True, exitstatus=exitstatus)
        self._record_session()
        facts = self._summary(plots=not self._interrupted()) or {}
        self._write_allure_extras()  # again: GPU and engine facts arrive during the run
        manifest = self.config.stash.get(MANIFEST_KEY, None)
        if manifest is not None:
            report: dict[str, Any] = {"outcomes": "outcomes.json", **facts}
            if (self.settings.run_dir / "results.csv").is_file():
                report.update(results_csv="results.csv", results_json="results.json")
            if (self.settings.run_dir / "verdicts.json").is_file():
                report["verdicts_json"] = "verdicts.json"
            if self.alluredir is not None:
                report["alluredir"] = str(self.alluredir)
            manifest.data = scrub(manifest.data, self.secrets)
            manifest.update(report=report)

    @pytest.hookimpl
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._drawing is not None:  # started, never waited for (the session ended before its reports)
            self._drawing.close()
            self._drawing = None


class _PlotStarter:
    """The first terminal summary: every test (and with it every benchmark and server) is done, so the reporter
    starts drawing the plots now, and the other plugins' summaries (the acceptance summary, the history line,
    third-party ones) run while they draw."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self) -> None:
        self.reporter.start_plots()


def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or config.pluginmanager.has_plugin(REPORTER):
        return
    reporter = Reporter(config, settings)
    config.stash[EXTRA_KEY]["reporter"] = reporter
    config.pluginmanager.register(reporter, REPORTER)
    config.pluginmanager.register(_PlotStarter(reporter), f"{REPORTER}-plots")
