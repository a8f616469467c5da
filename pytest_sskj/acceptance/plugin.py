"""Hooks of the acceptance suite: parameters from Settings, run order, verdict bookkeeping, terminal summary.

The suite's tests (``acceptance/test_*.py``) ask for one of six parameters and this plugin fills them
from :class:`~pytest_sskj.settings.Settings`: ``sskj_point`` (serving points, in execution order: grouped
by server, or A B A B where restarts are cheap), ``sskj_comparison``, ``sskj_curve``, ``sskj_slo_config``,
``sskj_baseline_config`` and ``sskj_search_config``.  Collection puts serving points first, then SLO gates,
baseline gates, comparisons, chunk curves and searches, so verdicts find their points already measured; within
each, the plan's order, whatever a reordering plugin did (pytest-randomly: :func:`order_note`).
Each acceptance test gets a pytest-timeout ``signal``-method marker sized to its server start (so fixture
teardown still runs after a timeout) unless it already has one.  The session object :class:`Acceptance` (in
``config.stash``) runs points through :class:`~pytest_sskj.acceptance.runner.PointRunner`, builds verdicts and
announces them with ``pytest_sskj_verdict``; the terminal summary prints the users' table from the point store.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance import accuracy, budget, context, matrix
from pytest_sskj.acceptance.matrix import Point
from pytest_sskj.acceptance.session import ACCEPTANCE_KEY, Acceptance, SiteDefaults, get_acceptance
from pytest_sskj.acceptance.summary import overhead_line, summary_lines  # imported early, not at session end
from pytest_sskj.bench.metrics import percentile_problems
from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

__all__ = ["ACCEPTANCE_KEY", "PARAMS", "Acceptance", "SiteDefaults", "get_acceptance", "order_note", "sskj_acceptance"]

SESSION_T0_KEY = pytest.StashKey[float]()
"""``time.perf_counter()`` at session start: the overhead line compares the session's wall time with the
benchmark time the points measured."""

PARAMS = (
    "sskj_point",
    "sskj_slo_config",
    "sskj_baseline_config",
    "sskj_comparison",
    "sskj_curve",
    "sskj_search_config",
    "sskj_accuracy",
    "sskj_accuracy_comparison",
    "sskj_max_context",
)
"""The parameters this plugin generates, in the order their tests run."""


@pytest.fixture(scope="session")
def sskj_acceptance(pytestconfig: pytest.Config) -> Acceptance:
    """The acceptance session object: ``serve(point)``, ``compare``, ``curve``, ``slo``, ``search``."""
    return get_acceptance(pytestconfig)


@pytest.fixture(scope="session")
def sskj_site() -> SiteDefaults:
    """Report labels of this site; ``acceptance/conftest.py`` overrides this default."""
    return SiteDefaults()


# -- hooks -------------------------------------------------------------------------------------------
def pytest_configure(config: pytest.Config) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    unsupported = percentile_problems(settings.slo, settings.requests)
    if unsupported and settings.percentile_strict:
        raise pytest.UsageError(
            "--sskj-slo: " + "; ".join(unsupported) + "\n  accepted: percentile gates the request count supports"
            "\n  Hint: raise --requests, gate a lower percentile, or drop --sskj-percentile-strict"
        )
    if settings.dry_run:
        return
    from pytest_sskj.acceptance.resume import guard_resume, write_fingerprint
    from pytest_sskj.recording import records

    if not settings.resume:
        if not hasattr(config, "workerinput") and records(config):
            write_fingerprint(settings)
        return
    d = settings.reports_dir / settings.resume
    if not (d / "points").is_dir() and not (d / "search").is_dir():
        known = sorted((p.name for p in settings.reports_dir.glob("*") if (p / "points").is_dir()), reverse=True)
        hint = (
            f"runs with points under {settings.reports_dir}: {', '.join(known[:5])}"
            if known
            else (f"no run under {settings.reports_dir} has finished points; check --reports-dir")
        )
        raise pytest.UsageError(f"--resume {settings.resume}: {d} holds no finished points to resume\n  Hint: {hint}")
    diffs = guard_resume(settings)
    if diffs:
        raise pytest.UsageError(
            f"--resume {settings.resume}: the run measured something else; its points cannot be reused:\n"
            + "".join(f"  - {x}\n" for x in diffs)
            + "  accepted: the run's own settings (see its measurement.json)\n"
            + "  Hint: drop the changed options to continue the run, or start a new run without --resume"
        )


def _search_id(x: tuple[str, int | None]) -> str:
    return f"{x[0]}{'' if x[1] is None else f'-chunk{x[1]}'}"


def _ordered_points(settings: Settings) -> Sequence[Point]:
    return matrix.execution_order(matrix.build_points(settings), interleave=matrix.interleaves(settings))


_GENERATED: Mapping[str, tuple[Callable[[Settings], Sequence[Any]], Callable[[Any], str], str]] = {
    "sskj_point": (_ordered_points, lambda p: p.id, "no-points"),
    "sskj_slo_config": (matrix.configs, lambda c: c.id, "no-points"),
    "sskj_baseline_config": (matrix.configs, lambda c: c.id, "no-points"),
    "sskj_comparison": (matrix.comparisons, lambda c: c.id, "no-candidate"),
    "sskj_curve": (matrix.curves, lambda c: c.id, "no-points"),
    "sskj_search_config": (matrix.search_configs, _search_id, "none"),
    "sskj_accuracy": (accuracy.keys, lambda k: k.id, "no-questions"),
    "sskj_accuracy_comparison": (accuracy.comparisons, lambda c: c.id, "no-candidate"),
    "sskj_max_context": (context.keys, lambda k: k.id, "no-probe"),
}
"""Each parameter of :data:`PARAMS`: its values from the settings, a value's test id, the id of "none"."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    settings = metafunc.config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    names = set(metafunc.fixturenames)
    for name in PARAMS:  # in PARAMS order, as the suite's tests run
        if name not in names:
            continue
        values_of, id_of, none_id = _GENERATED[name]
        # an empty list is one ``None`` parameter, deselected as not applicable (see pytest_collection_modifyitems)
        values: Sequence[Any] = list(values_of(settings)) or [None]
        metafunc.parametrize(name, values, ids=[id_of(v) if v else none_id for v in values])


def _param_rank(item: pytest.Item) -> int:
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return -1
    for i, name in enumerate(PARAMS):
        if name in callspec.params:
            return i
    return -1


def _plan_position(item: pytest.Item) -> tuple[str, int, tuple[int, ...], str]:
    """Where an acceptance test stands in the plan, whatever order it arrived in: its test function, then its
    parameters' positions in their plan lists (points in execution order: grouped by server, or A B A B).  A
    reordering plugin (pytest-randomly shuffles every module's tests before any other plugin sees them) must not
    turn interleaved repeats into blocks, nor make one server start per point: the run order is part of the
    measurement's design.  Other tests keep the order they arrived in."""
    path, lineno, _ = item.location
    indices = getattr(getattr(item, "callspec", None), "indices", {})
    return (path, -1 if lineno is None else lineno, tuple(indices.values()), item.nodeid)


def pytest_report_header(config: pytest.Config) -> str | None:
    return order_note(config) if config.stash.get(SETTINGS_KEY, None) is not None else None


def order_note(config: pytest.Config) -> str | None:
    """The report header's line when pytest-randomly would reorder the session: the acceptance tests keep the plan's
    order (:func:`_plan_position`) and its reseeding of the global RNGs does not reach the workloads (every prompt,
    request and twin draw comes from its own seeded generator)."""
    if not config.pluginmanager.hasplugin("randomly") or not config.getoption("randomly_reorganize", False):
        return None
    return (
        "sskj: acceptance tests run in the plan's order (the order is part of the A/B design); pytest-randomly "
        "reorders only other tests, and its reseeding does not reach the seeded workloads"
    )


def _budget_s(settings: Settings, item: pytest.Item) -> float:
    """pytest-timeout's bound of one acceptance test: its server start plus its points, each point allowed
    the engine's budget or, if longer, the stall detection and teardown (the stall verdict comes first)."""
    rank = _param_rank(item)
    per_point = _per_point_s(settings, item if rank == 0 else None)
    points = 1 if rank <= 0 else 2 * max(settings.repeats, settings.max_repeats or 0) * max(1, len(settings.chunks))
    if rank == PARAMS.index("sskj_search_config"):
        points = 16
    probe = 0.0  # a host point runs the max-context search after its bench (or the verdict serves the host point)
    if settings.max_context is not None and rank in (0, PARAMS.index(context.PARAM)):
        probe = context.probe_limit(*settings.max_context) * settings.max_context_timeout_s
    return settings.health_timeout_s * (1 if rank <= 0 else 2) + per_point * points + probe


def _per_point_s(settings: Settings, item: pytest.Item | None) -> float:
    """A serving point's own time budget (its shape and concurrency at the floor rates: acceptance/budget.py), or
    the longest of the plan's for a verdict test that may serve any of them."""
    if item is not None:
        p: Point = item.callspec.params["sskj_point"]  # type: ignore[attr-defined]
        isl, osl = p.shape or (settings.isl, settings.osl)
        return budget.point_budget_s(settings, isl, osl, p.concurrency)
    return max(budget.point_budget_s(settings, i, o, c) for i, o, c in budget.cells(settings))


def _not_applicable(param: str) -> Callable[[Settings, str, Any], str | None]:
    if param in accuracy.PARAMS:
        return accuracy.not_applicable
    return context.not_applicable if param == context.PARAM else matrix.not_applicable


def _deselect_not_applicable(config: pytest.Config, settings: Settings, items: list[pytest.Item]) -> None:
    """Deselect the verdict tests that do not apply to this run (:func:`matrix.not_applicable`) and list them
    with their reason (``NOT_APPLICABLE_KEY``: outcomes.json and the release mark), as the baseline gate is."""
    from pytest_sskj.stash import NOT_APPLICABLE_KEY

    gone: list[pytest.Item] = []
    na = config.stash.setdefault(NOT_APPLICABLE_KEY, {})
    for it in items:
        params = getattr(getattr(it, "callspec", None), "params", {})
        for name, value in params.items():
            why = _not_applicable(name)(settings, name, value)
            if why is not None:
                na[it.nodeid] = why
                gone.append(it)
                break
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = [it for it in items if it not in gone]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    _deselect_not_applicable(config, settings, items)
    order = {id(it): i for i, it in enumerate(items)}
    items.sort(key=lambda it: (_param_rank(it), _plan_position(it) if _param_rank(it) >= 0 else (order[id(it)],)))
    timeout_on = config.pluginmanager.hasplugin("timeout") and hasattr(signal, "SIGALRM")
    cli_timeout = config.getoption("timeout", None) if timeout_on else None
    xdist_on = config.pluginmanager.hasplugin("xdist")
    for it in items:
        if _param_rank(it) < 0:
            continue
        if timeout_on and it.get_closest_marker("timeout") is None:
            if cli_timeout is None:  # the point budget wins over an ini default such as timeout = 600
                it.add_marker(pytest.mark.timeout(_budget_s(settings, it), method="signal"))
            else:
                it.add_marker(pytest.mark.timeout(method="signal"))
        if xdist_on and _param_rank(it) == 0:
            point = it.callspec.params["sskj_point"]  # type: ignore[attr-defined]
            it.add_marker(pytest.mark.xdist_group(f"sskj-{point.backend}-chunk{point.chunk}"))


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[SESSION_T0_KEY] = time.perf_counter()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.dry_run:
        return
    acc = config.stash.get(ACCEPTANCE_KEY, None)
    if acc is None and not (settings.run_dir / "points").is_dir():
        return
    acc = acc or get_acceptance(config)
    rows = acc.stored_rows()
    lines = summary_lines(rows, acc.stored_verdicts(), baseline=settings.baseline, run_dir=str(settings.run_dir))
    if not lines:
        return
    overhead = session_overhead(config, rows)
    if overhead is not None:
        at = len(lines) - 1 if lines[-1].startswith("results:") else len(lines)
        lines.insert(at, overhead)
    lines[-1:-1] = (
        _evidence_lines(config, settings.run_dir, acc.stored_verdicts()) if lines[-1].startswith("results:") else []
    )
    terminalreporter.write_sep("=", "sskj acceptance summary (median of repeats)")
    from pytest_sskj.twin.plugin import clock_note

    clock = clock_note(settings.as_dict())
    if clock:
        terminalreporter.write_line(f"sskj: {clock}")
    for line in lines:
        terminalreporter.write_line(line)
    from pytest_sskj.report.conclusions import conclusion_lines  # computed from the run (h1-twin)

    for line in conclusion_lines(rows, acc.stored_verdicts(), settings.as_dict())[1:]:
        terminalreporter.write_line(line)


def session_overhead(config: pytest.Config, rows: Sequence[Mapping[str, Any]]) -> str | None:
    """The terminal's ``overhead:`` line (:func:`overhead_line`: server starts vs server runs, session wall vs
    measured benchmark time) of this session; ``None`` before the session started.  The wall time is taken at the
    first call of the session's end, so the terminal and ``summary.md`` (the reporter stores the line in the
    manifest's ``session``) show the same figures."""
    t0 = config.stash.get(SESSION_T0_KEY, None)
    if t0 is None:
        return None
    extra = config.stash.get(EXTRA_KEY, {})
    wall = extra.setdefault("session_wall_s", time.perf_counter() - t0)
    from pytest_sskj.server.pool import ServerPool

    pool = extra.get("server_pool")
    return overhead_line(rows, pool.starts if isinstance(pool, ServerPool) else None, float(wall))


def session_deselections(config: pytest.Config) -> tuple[int, list[str]]:
    """How many tests the session deselected and why (:func:`deselection_lines`), from the reporter's record
    of the selection: the terminal summary and ``summary.md`` both show these."""
    from pytest_sskj.acceptance.summary import deselection_lines

    reporter = config.stash.get(EXTRA_KEY, {}).get("reporter")
    selection = getattr(getattr(reporter, "outcomes", None), "selection", None) or {}
    na = selection.get("not_applicable") or {}
    deselected = sum(int(n) for n in (selection.get("deselected") or {}).values()) + len(na)
    return deselected, deselection_lines(na, deselected)


def _evidence_lines(config: pytest.Config, run_dir: Path, verdicts: Sequence[Mapping[str, Any]]) -> list[str]:
    """The long verdict evidence goes to ``verdicts.txt`` in the run directory (the terminal has the headlines),
    and every deselection of the session is explained."""
    from pytest_sskj.acceptance.summary import verdict_lines

    out: list[str] = []
    full = verdict_lines(verdicts)
    if full:
        try:
            from pytest_sskj.rundir import atomic_write_text

            atomic_write_text(run_dir / "verdicts.txt", "\n".join(full) + "\n")
            out.append(f"evidence of every verdict: {run_dir / 'verdicts.txt'} (and verdicts.json)")
        except OSError as exc:
            out.append(f"could not write {run_dir / 'verdicts.txt'}: {exc}")
    out += session_deselections(config)[1]
    return out


def point_param_ids(settings: Settings) -> list[str]:
    """The ``test_serving`` ids of ``settings`` in execution order (used by the dry run and tests)."""
    pts = matrix.execution_order(matrix.build_points(settings), interleave=matrix.interleaves(settings))
    return [p.id for p in pts]
