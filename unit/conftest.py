"""Self-tests run with none of the user's pytest-sskj settings in the environment, and fast by default.

A user's shell (or CI: ``.ci/run`` sets ``SSKJ_RUN_ID`` for the outer ``pytest unit/`` so the release mark can
name the run) may carry ``SSKJ_*`` settings; the outer session honours them, but every test, and every pytester
or subprocess run it starts, sees only what the test itself sets.  Infrastructure variables that are not settings
(``SSKJ_REQUIRE_*``, ``SSKJ_VLLM_VENV``, ``SSKJ_SGLANG_PYTHON``, ``SSKJ_NETNS_*``, ...) are kept.

``pytest unit/`` is the inner loop: the end-to-end checks marked ``slow`` (a real vLLM server, the real SGLang
parsers, network-namespace SSH hosts, hangs waiting out the default 30 s stall timeout, signals mid-run, ...) are
deselected unless ``--run-slow`` is given; ``.ci/run`` runs them as their own phase (``pytest unit/ --run-slow -m
slow``).  The numerics, metrics, option parsing, oracle and the embedded engine's end-to-end tests stay in the
inner loop.  Inner pytest runs (pytester, ``python -m pytest``) leave out the third-party plugins that none of them
uses (hypothesis, anyio): loading them is most of a bare pytest start-up here.
"""

from __future__ import annotations

import gc
import os

import pytest
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite

from pytest_sskj.subsystems import OPTIONS

# In-process pytester runs restore ``sys.modules`` afterwards, dropping what they imported; SQLAlchemy's dialect
# modules register functions in a registry that outlives them, so a dialect first imported inside an inner run
# and imported again later warns "GenericFunction ... is already registered" (an error here).  Imported once
# up front, they are never dropped.
_PRELOADED = (sqlalchemy.dialects.postgresql, sqlalchemy.dialects.sqlite)

RUN_SLOW = "--run-slow"
SLOW_HINT = "pytest unit/ --run-slow -m slow"
INNER_ADDOPTS = "-p no:hypothesispytest -p no:anyio"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        RUN_SLOW,
        action="store_true",
        default=False,
        help=f"also run the slow end-to-end checks (marker 'slow'); CI runs them as their own phase: {SLOW_HINT}",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption(RUN_SLOW):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]
    config.stash[_SLOW_DESELECTED] = len(slow)
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the line
        config.workeroutput["slow_deselected"] = len(slow)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``pytest unit/`` as typed runs the inner loop on every core (xdist's ``-n auto --dist worksteal``).

    Only when nothing says otherwise: ``-n N`` / ``-n 0`` (explicit), ``-p no:xdist``, ``--pdb``, ``--collect-only``,
    ``--run-slow`` (the slow phase builds netns hosts and sends signals: it stays serial) and an xdist worker
    itself keep pytest's own behaviour.  Runs before xdist's ``pytest_cmdline_main`` (a conftest registers after
    the plugin, so its ``tryfirst`` implementation is called first), which turns ``auto`` into the core count.
    """
    opt = config.option
    if not config.pluginmanager.hasplugin("xdist") or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if getattr(opt, "numprocesses", None) is not None or getattr(opt, "dist", "no") != "no":
        return
    if opt.usepdb or opt.collectonly or config.getoption(RUN_SLOW) or (os.cpu_count() or 1) < 2:
        return
    opt.numprocesses = "auto"
    opt.dist = "worksteal"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    n = getattr(node, "workeroutput", {}).get("slow_deselected")
    if isinstance(n, int):
        config: pytest.Config = node.config  # type: ignore[attr-defined]
        config.stash[_SLOW_DESELECTED] = n


_SLOW_DESELECTED = pytest.StashKey[int]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze the session's heap once collected (test modules, torch, SQLAlchemy, ...): every later full
    collection -- pytest's own after each in-process pytester session, the bench runner's before a measured
    phase -- then walks only what was allocated since, not the hundreds of thousands of objects of the
    session (measured: 143 collections took 35 s of a 150 s run before)."""
    gc.collect()
    gc.freeze()


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Freeze again after every test (O(1)): the bench runner unfreezes the heap after its measured phase."""
    gc.freeze()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    n = config.stash.get(_SLOW_DESELECTED, 0)
    if n:
        terminalreporter.write_line(f"{n} slow end-to-end check(s) deselected; run them with: {SLOW_HINT}")


@pytest.fixture(autouse=True)
def _no_user_settings_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for opt in OPTIONS:
        if opt.env in _INFRA_SETTINGS:
            continue
        monkeypatch.delenv(opt.env, raising=False)


_INFRA_SETTINGS = frozenset({"SSKJ_ROUTER_PYTHON"})
"""Settings that name this machine's infrastructure, not a user's choice: the router's venv (``.ci/install_router.sh``),
which the router and PD tests launch; removing it made them skip on any machine without a router elsewhere."""


@pytest.fixture(autouse=True)
def _lean_inner_pytest_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"), INNER_ADDOPTS])))


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, whose set-up clears ``PYTEST_ADDOPTS``, with the lean inner-run plugin set put back."""
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
    return pytester
