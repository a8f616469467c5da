"""Server fixtures and hooks: ``server_pool`` (session), ``inference_server`` (per test, by spec), teardown.

The pool lives in ``config.stash[EXTRA_KEY]["server_pool"]``.  ``inference_server`` resolves the test's
spec from, in order: indirect parametrization (``request.param`` = a :class:`ServerSpec`, a dict of
spec overrides or a backend name), the ``sskj_server(**overrides)`` marker, then the session default
(first backend, first chunk).  A ``pytest_runtest_makereport`` wrapper attaches the log-oracle findings
of the test's window (and, when the test failed, every rank's log tail) as report sections; a test that
timed out (pytest-timeout) gets its server stopped so the next test starts a fresh one.  The pool is
closed at session end, on Ctrl-C, and on SIGTERM (a handler closes it, then re-delivers SIGTERM with the
previous disposition); the closing line says whether every launched PID is gone.

xdist: every worker has its own pool (no cross-worker sharing; a spec may then run once per worker).
Ports never collide: the embedded engine binds port 0 and prints its address, other local engines get a
free port picked when their spec says port 0, and log names carry the worker id.  Multi-node GPU runs
should not use xdist (workers would launch on the same GPUs).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any

import pytest

from pytest_sskj.engines import get_engine
from pytest_sskj.errors import ServerCrashed
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.logscan import Finding, LogMark
from pytest_sskj.server.pool import RunningServer, ServerPool
from pytest_sskj.server.spec import ServerSpec, spec_from_settings
from pytest_sskj.settings import Settings
from pytest_sskj.stash import EXTRA_KEY, MANIFEST_KEY, SETTINGS_KEY

__all__ = ["FINDINGS_KEY", "SERVER_KEY", "get_pool", "inference_server", "resolve_spec", "server_pool"]

SERVER_KEY = pytest.StashKey[tuple[RunningServer, LogMark]]()
"""On a test item: the server it used and the log mark taken when the test got it."""
FINDINGS_KEY = pytest.StashKey[list[Finding]]()
"""On a test item: the log-oracle findings of the test's window (set after its call phase)."""

_POOL = "server_pool"
_SIGTERM = "server_pool_sigterm"
_ANNOUNCED = "server_pool_announced"


def _worker_tag(config: pytest.Config) -> str:
    wi = getattr(config, "workerinput", None)
    return str(wi.get("workerid", "")) if isinstance(wi, dict) else ""


def _launcher_factory(settings: Settings, worker: str = "") -> Callable[[], Launcher]:
    def make() -> Launcher:
        from pytest_sskj.server.launcher import launcher_class

        return launcher_class(settings.launcher).from_settings(settings, worker=worker)

    return make


def get_pool(config: pytest.Config) -> ServerPool:
    """This session's (this worker's) pool, created on first use; installs the SIGTERM handler."""
    extra = config.stash[EXTRA_KEY]
    pool = extra.get(_POOL)
    if isinstance(pool, ServerPool):
        return pool
    settings = config.stash[SETTINGS_KEY]
    tag = _worker_tag(config)
    pool = ServerPool(
        log_dir=settings.run_dir / "logs",
        launcher=_launcher_factory(settings, tag),
        health_timeout_s=settings.health_timeout_s,
        target_url=settings.target_url,
        model_cache_dir=settings.reports_dir / ".cache" / "models",
        commands_for=lambda spec: config.hook.pytest_sskj_server_commands(config=config, spec=spec),
        name_tag=tag,
        prelaunch=config.hook.pytest_sskj_server_prelaunch(config=config),
    )
    new_pool = pool
    pool.on_started = lambda server: _record_engine_facts(config, new_pool, server)
    extra[_POOL] = pool
    _install_sigterm(config, pool)
    from pytest_sskj.interrupts import INTERRUPT_GRACE_S, on_interrupt

    on_interrupt(config, lambda: setattr(pool, "stop_timeout_s", min(pool.stop_timeout_s, INTERRUPT_GRACE_S)))
    return pool


_VERSIONS_PY = (
    "import importlib, importlib.metadata, json, sys\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try:\n"
    "        out[name] = importlib.metadata.version(name)\n"
    "    except Exception:\n"
    "        try:\n"
    "            out[name] = getattr(importlib.import_module(name), '__version__', None)\n"
    "        except Exception:\n"
    "            continue\n"
    "    if name == 'torch':\n"
    "        try:\n"
    "            import torch\n"
    "            out[name] = torch.__version__\n"
    "            out['torch_cuda'] = torch.version.cuda\n"
    "        except Exception:\n"
    "            pass\n"
    "    if name == 'flashinfer':\n"
    "        try:\n"
    "            from flashinfer import _build_meta\n"
    "            out['flashinfer_commit'] = getattr(_build_meta, '__git_commit__', None)\n"
    "        except Exception:\n"
    "            pass\n"
    "print(json.dumps(out))\n"
)
"""The installed version of each module named on its command line (the engine's ``versions.modules``): the
distribution's metadata first (no import side effects: a package whose import needs a GPU still reports), else the
module's ``__version__``; torch is imported for its build tag (``2.11.0+cu130``: the metadata may say ``2.11.0``,
measured on the H200 image) and its CUDA version."""


def engine_versions(pool: ServerPool, server: RunningServer) -> dict[str, Any]:
    """The engine's version modules (``Engine.versions.modules``: the engine, FlashInfer with its build commit,
    torch) as imported on node 0; nothing for an engine without such modules or an external server."""
    spec = server.spec
    modules = get_engine(spec.engine).versions.modules
    if not modules or server.external:
        return {}
    node = spec.nodes[0] if spec.nodes else "local"
    python = spec.python or ("python3" if spec.nodes else sys.executable)
    try:
        res = pool.launcher.run(node, [python, "-c", _VERSIONS_PY, *modules], timeout_s=60.0)
        data = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 and res.stdout.strip() else {}
    except Exception as exc:  # versions are report facts: never fail a launch over them
        return {"versions_error": f"{type(exc).__name__}: {exc}"}
    return data if isinstance(data, dict) else {}


def _record_engine_facts(config: pytest.Config, pool: ServerPool, server: RunningServer) -> None:
    """Engine facts into the run manifest: versions on node 0 and the effective config the engine reports."""
    manifest = config.stash.get(MANIFEST_KEY, None)
    if manifest is None:
        return
    engine_ = get_engine(server.spec.engine)
    info = server.server_info() if engine_.config_facts else None
    facts: dict[str, Any] = {"engine": server.spec.engine, "startup_s": server.startup_s}
    if engine_.versions.checked:
        facts["contract_checked_version"] = engine_.versions.checked
    if info:
        for key in engine_.config_facts:
            if key in info:
                facts[key] = info[key]
    versions = engine_versions(pool, server)
    facts.update(versions)
    engines = dict(manifest.data.get("engines", {}))
    engines[server.spec.label] = facts
    # the nodes' shared build (``build``, ``build.*``: written by the identity pre-launch) stays
    engine = {k: v for k, v in (manifest.data.get("engine") or {}).items() if k == "build" or k.startswith("build.")}
    engine.update({k: v for k, v in versions.items() if v is not None})
    engine["name"] = server.spec.engine
    manifest.update(engines=engines, engine=engine)


def _install_sigterm(config: pytest.Config, pool: ServerPool) -> None:
    """A session without the run's handlers (a self-test session that records no run): SIGTERM closes the pool,
    then dies of SIGTERM.  With them (:func:`pytest_sskj.interrupts.install`) SIGTERM unwinds like Ctrl-C, and
    closing the pool here, inside the signal, would stop the servers before the bench cancels its requests."""
    from pytest_sskj.interrupts import installed

    if threading.current_thread() is not threading.main_thread() or installed(config):
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        try:
            from pytest_sskj.interrupts import INTERRUPT_GRACE_S

            pool.stop_timeout_s = min(pool.stop_timeout_s, INTERRUPT_GRACE_S)  # interrupted: nothing to wait for
            report = pool.close()
            capman = config.pluginmanager.getplugin("capturemanager")
            if capman is not None:  # the line must reach the real stderr, not a test's capture buffer
                capman.suspend_global_capture(in_=False)
            os.write(2, f"\nsskj: SIGTERM: {report.line()}\n".encode())
        finally:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            if callable(previous):
                previous(signum, frame)
            else:
                os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)
    config.stash[EXTRA_KEY][_SIGTERM] = (on_sigterm, previous)


def _close_pool(config: pytest.Config) -> str | None:
    extra = config.stash.get(EXTRA_KEY, {})
    pool = extra.get(_POOL)
    if not isinstance(pool, ServerPool):
        return None
    report = pool.close()
    first = not extra.get(_ANNOUNCED)
    extra[_ANNOUNCED] = True
    installed = extra.pop(_SIGTERM, None)
    if installed is not None and threading.current_thread() is threading.main_thread():
        handler, previous = installed
        if signal.getsignal(signal.SIGTERM) is handler:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
    return report.line() if first else None


def resolve_spec(request: pytest.FixtureRequest, settings: Settings) -> ServerSpec:
    """The spec a test asks for: indirect param, then the ``sskj_server`` marker, then the session default."""
    from pytest_sskj.server.speculative import arm_override
    from pytest_sskj.speculative import split_arm

    base = spec_from_settings(
        settings,
        backend=split_arm(settings.baseline)[0],
        chunk=settings.chunks[0] if settings.chunks else None,
        override=arm_override(settings, settings.baseline),
    )
    param = getattr(request, "param", None)
    if isinstance(param, ServerSpec):
        return param
    overrides: dict[str, Any] = {}
    if isinstance(param, str):
        overrides["backend"] = param
    elif isinstance(param, dict):
        overrides.update(param)
    elif param is not None:
        raise TypeError(
            f"inference_server parameter must be a ServerSpec, a dict of overrides or a backend "
            f"name, not {type(param).__name__}: {param!r}"
        )
    marker = request.node.get_closest_marker("sskj_server")
    if marker is not None:
        if marker.args:
            raise TypeError("sskj_server takes keyword overrides only, e.g. @pytest.mark.sskj_server(backend='serial')")
        overrides = {**dict(marker.kwargs), **overrides}
    if not overrides:
        return base
    known = set(ServerSpec.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown ServerSpec field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    for k in ("nodes", "extra_args", "env", "labels"):
        if k in overrides and isinstance(overrides[k], list):
            overrides[k] = tuple(tuple(x) if isinstance(x, list) else x for x in overrides[k])
    return base.with_(**overrides)


@pytest.fixture(scope="session")
def server_pool(pytestconfig: pytest.Config) -> Generator[ServerPool, None, None]:
    """The session's :class:`ServerPool` (one per xdist worker); closed when the session ends."""
    pool = get_pool(pytestconfig)
    yield pool
    pool.close()


@pytest.fixture
def inference_server(request: pytest.FixtureRequest, server_pool: ServerPool, sskj_settings: Settings) -> RunningServer:
    """A healthy server for this test's spec (shared with every test of the same spec)."""
    spec = resolve_spec(request, sskj_settings)
    server = server_pool.get(spec)
    request.node.stash[SERVER_KEY] = (server, server.mark())
    return server


def _timed_out(report: pytest.TestReport) -> bool:
    return report.failed and "from pytest-timeout" in str(report.longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report: pytest.TestReport = yield
    entry = item.stash.get(SERVER_KEY, None)
    if entry is None or report.when == "teardown" or (report.when == "setup" and not report.failed):
        return report
    server, mark = entry
    findings = server.findings_since(mark)
    item.stash[FINDINGS_KEY] = findings
    if findings:
        report.user_properties.append(("sskj_findings", [f.row() for f in findings]))
        report.sections.append(
            (
                "sskj server findings",
                "\n".join(
                    f"{f.describe()}\n" + "\n".join(f"    | {x}" for x in f.excerpt.splitlines()) for f in findings
                ),
            )
        )
    if report.failed:
        try:
            server.check_alive()
        except ServerCrashed as exc:
            report.sections.append(("sskj server state", str(exc)))
        tails = server.log_tail(30)
        if tails:
            report.sections.append(
                (
                    "sskj server log tail",
                    "\n".join(f"--- {k} ({server.log_paths[k]})\n" + "\n".join(v) for k, v in tails.items()),
                )
            )
        if _timed_out(report) and not server.external:
            pool = item.config.stash[EXTRA_KEY].get(_POOL)
            if isinstance(pool, ServerPool):
                pool.stop(server.spec)
                report.sections.append(
                    (
                        "sskj server",
                        f"the test timed out: server {server.spec.label} was stopped; the next test starts a fresh one",
                    )
                )
    return report


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    line = _close_pool(session.config)
    if line:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line(f"sskj: {line}", red="STILL RUNNING" in line, bold="STILL RUNNING" in line)


def pytest_unconfigure(config: pytest.Config) -> None:
    _close_pool(config)
