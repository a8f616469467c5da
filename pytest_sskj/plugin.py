"""pytest-sskj's hook surface (hooks only; the work lives in the subsystem modules).

Registered through the ``pytest11`` entry point ``sskj``; ``-p no:sskj`` disables it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Generator
from typing import Any

import pytest

from pytest_sskj.redact import redact_url
from pytest_sskj.stash import EXTRA_KEY, MANIFEST_KEY, SETTINGS_KEY

# Fixture and reporter modules, imported in pytest_configure (each imports its heavy deps lazily).
_SUBPLUGINS = (
    "pytest_sskj.fixtures",
    "pytest_sskj.gpu.fixtures",
    "pytest_sskj.gpu.serving",
    "pytest_sskj.identity.plugin",
    "pytest_sskj.server.fixtures",
    "pytest_sskj.bench.fixtures",
    "pytest_sskj.report.plugin",
    "pytest_sskj.history.plugin",
    "pytest_sskj.acceptance.plugin",
    "pytest_sskj.deploy.plugin",
    "pytest_sskj.twin.plugin",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    from pytest_sskj.options import register_options
    from pytest_sskj.subsystems import OPTIONS

    register_options(parser, OPTIONS)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    from pytest_sskj.options import check_raw_args

    check_raw_args(args)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_sskj import hookspecs
    from pytest_sskj.rewrite import unmark_plugin_package

    unmark_plugin_package(pluginmanager)
    pluginmanager.add_hookspecs(hookspecs)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_sskj.markers import register_markers
    from pytest_sskj.settings import resolve_settings
    from pytest_sskj.subsystems import build_registry

    register_markers(config)
    config.stash[EXTRA_KEY] = {}
    if config.option.help or config.option.version:
        return
    settings = resolve_settings(config, build_registry())
    if _is_worker(config):  # every xdist worker shares the controller's run id
        run_id = config.workerinput.get("sskj_run_id")  # type: ignore[attr-defined]
        if run_id:
            from dataclasses import replace

            settings = replace(settings, run_id=run_id)
    if config.option.collectonly and not settings.dry_run:
        from dataclasses import replace

        # --collect-only, like the dry run, applies every check and writes nothing: no run dir, no record
        settings = replace(settings, dry_run=True)
    config.stash[SETTINGS_KEY] = settings
    from pytest_sskj.recording import decide

    decide(config, settings)  # a self-test session given no run id leaves no run behind
    for name in _SUBPLUGINS:
        if importlib.util.find_spec(name) is not None:
            config.pluginmanager.import_plugin(name)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: hand the run id to every worker."""
    settings = node.config.stash.get(SETTINGS_KEY, None)
    if settings is not None:
        node.workerinput["sskj_run_id"] = settings.run_id


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    from pytest_sskj.plan import parallel_text, shape_text
    from pytest_sskj.recording import records

    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not records(config):
        return None
    s = settings
    target = (
        f"target {redact_url(s.target_url)}"
        if s.target_url
        else f"launcher {s.launcher}, nodes {','.join(s.nodes) or 'local'}"
    )
    lines = [
        f"sskj: run {s.run_id} -> {s.run_dir_display}" + (" (dry run)" if s.dry_run else ""),
        f"sskj: engine {s.engine}, {target}, {parallel_text(s)}" + (f", profile {s.profile}" if s.profile else ""),
        f"sskj: backends {','.join(s.backends)} | chunks {','.join(map(str, s.chunks))} | "
        f"C {','.join(map(str, s.concurrencies))} | {shape_text(s)} | {s.requests} req x {s.repeats}",
    ]
    from pytest_sskj.server.cpus import launch_partition

    local = s.launcher == "local" and not s.target_url
    lines.append("sskj: " + launch_partition(s.cpu_partition, local=local, run_cpus=s.run_cpus).describe())
    import os

    from pytest_sskj.plan import overridden_env
    from pytest_sskj.subsystems import OPTIONS

    note = overridden_env(s, os.environ, OPTIONS)
    if note:
        lines.append(f"sskj: note: {note}")
    gpu_line = config.stash[EXTRA_KEY].get("gpu_header")
    if gpu_line:
        lines.append(f"sskj: {gpu_line}")
    return lines


def pytest_sessionstart(session: pytest.Session) -> None:
    from pytest_sskj.recording import records

    config = session.config
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.dry_run or _is_worker(config) or not records(config):
        return
    from pytest_sskj import interrupts

    interrupts.install(config, finish_manifest)  # SIGTERM unwinds like Ctrl-C: an interrupted, not a vanished, run
    from pytest_sskj.report.manifest import RunManifest, ensure_reports_root
    from pytest_sskj.report.scrub import settings_secrets

    ensure_reports_root(settings.reports_dir)
    _own_run_id(config, settings.run_dir)
    from pytest_sskj.server.cpus import launch_partition

    manifest = RunManifest.start(
        settings.run_dir,
        settings.run_id,
        settings.as_dict(),
        settings_secrets(settings),
        args=config.invocation_params.args,
    )
    local = settings.launcher == "local" and not settings.target_url
    part = launch_partition(settings.cpu_partition, local=local, run_cpus=settings.run_cpus)
    manifest.update(**part.as_dict())  # client_cpus, server_cpus
    config.stash[MANIFEST_KEY] = manifest


def _own_run_id(config: pytest.Config, run_dir: Any) -> None:
    """Take the run directory's lock (:func:`pytest_sskj.rundir.acquire_run_lock`): a second live run with
    the same run id is a usage error, a dead run's lock is taken over (said on the terminal)."""
    from pytest_sskj.rundir import RunIdInUse, acquire_run_lock

    try:
        lock = acquire_run_lock(run_dir)
    except RunIdInUse as exc:
        raise pytest.UsageError(
            f"--run-id: {exc}\n  accepted: a run id that no live run is writing (two writers would mix their "
            "results in one folder)\n  Hint: give another --run-id, or wait for that run to finish"
        ) from None
    config.stash[EXTRA_KEY]["run_lock"] = lock
    if lock.took_over:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"sskj: run {run_dir.name}: {lock.took_over}", yellow=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    lock = config.stash[EXTRA_KEY].get("run_lock") if EXTRA_KEY in config.stash else None
    if lock is not None:
        lock.release()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    settings = session.config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.dry_run or _is_worker(session.config) or session.config.option.collectonly:
        return None
    from pytest_sskj.plan import plan_lines
    from pytest_sskj.report.scrub import scrub_text, settings_secrets

    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    secrets = settings_secrets(settings)
    for line in plan_lines(session.config, settings, session.items):
        if tr is not None:
            tr.write_line(scrub_text(line, secrets))
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Complete the manifest before pytest's final line, so that the summary written next shows it."""
    finish_manifest(config, int(exitstatus))


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    yield
    from pytest_sskj import interrupts

    interrupts.restore(session.config)
    finish_manifest(session.config, int(session.exitstatus))


def finish_manifest(config: pytest.Config, exitstatus: int) -> None:
    """``manifest.finish`` with the outcome counts and the interrupting signal (idempotent)."""
    manifest = config.stash.get(MANIFEST_KEY, None)
    if manifest is None:
        return
    from pytest_sskj import interrupts

    tr = config.pluginmanager.get_plugin("terminalreporter")
    counts: dict[str, int] = {}
    if tr is not None:
        for key in ("passed", "failed", "skipped", "error", "xfailed", "xpassed"):
            counts[key] = len([r for r in tr.stats.get(key, []) if getattr(r, "when", "call") in ("call", "setup")])
    error = config.stash[EXTRA_KEY].get("write_error")
    try:
        manifest.finish(exitstatus=exitstatus, counts=counts, signal=interrupts.received(config), error=error)
    except OSError as exc:  # the disk that failed a point may fail the manifest too: one line, no traceback
        from pytest_sskj.rundir import write_failure

        reason = write_failure(exc) or f"could not write {manifest.path}: {exc}"
        config.stash[EXTRA_KEY].setdefault("write_error", reason)
        if tr is not None:
            tr.write_line(f"sskj: run ended as error: {reason}; the manifest still says 'running'", red=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A failed write of run data (disk full, read-only, I/O error) ends the run as ``error``: the test's
    report is the one-line reason, the session stops, finished points stay as written."""
    report = yield
    reason = _write_failure_of(call.excinfo.value if call.excinfo is not None else None)
    if reason is not None and report.failed:
        extra = item.config.stash[EXTRA_KEY]
        extra.setdefault("write_error", reason)
        report.longrepr = f"sskj: {reason}; the run ends as error (points finished before it are kept)"
        item.session.shouldstop = f"sskj: {extra['write_error']}"
    return report


def pytest_internalerror(excrepr: Any, excinfo: pytest.ExceptionInfo[BaseException]) -> bool | None:
    """A write failure outside a test (the closing reports on a full disk) is one line, not a traceback."""
    reason = _write_failure_of(excinfo.value)
    if reason is None:
        return None
    import sys

    sys.stderr.write(f"sskj: run ended as error: {reason}\n")
    return True


def _write_failure_of(exc: BaseException | None) -> str | None:
    from pytest_sskj.rundir import write_failure

    return write_failure(exc)
