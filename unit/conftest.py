"""Self-tests run with none of the user's pytest-sskj settings in the environment, and fast by default.

A user's shell (or CI: ``.ci/run`` sets ``SSKJ_RUN_ID`` for the outer ``pytest unit/`` so the release mark can
name the run) may carry ``SSKJ_*`` settings; the outer session honours them, but every test, and every pytester
or subprocess run it starts, sees only what the test itself sets.  Infrastructure variables that are not settings
(``SSKJ_REQUIRE_*``, ``SSKJ_VLLM_VENV``, ``SSKJ_SGLANG_PYTHON``, ``SSKJ_NETNS_*``, ...) are kept.

``pytest unit/`` is the inner loop: the end-to-end checks marked ``slow`` (a real vLLM server, the real SGLang
parsers, network-namespace SSH hosts, hangs waiting out the default 30 s stall timeout, signals mid-run, ...) are
deselected unless ``--run-slow`` is given; ``.ci/run`` runs them as their own phase (``pytest unit/ --run-slow -m
slow``); the inner loop runs on xdist workers unless told otherwise (``-n 0``, ``-p no:xdist``, ``--pdb``), the slow
phase only when told (``-n N``: every worker with its own network-namespace hosts).  Checks that run a whole pytest
session (or a server) in a subprocess for several seconds each -- the secret-planting runs, the full-disk run,
the unit-run records, ``serve`` outliving its command, the Allure session -- are in the slow phase too (issue
26: the inner loop as typed in about a minute on two cores).  The numerics, metrics,
option parsing, oracle and the embedded engine's end-to-end tests stay in the inner loop.  Inner pytest runs
(pytester, ``python -m pytest``) load only the plugins the project installs and tests (:data:`INNER_ADDOPTS`).
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import os
import sys
from collections.abc import Iterable
from typing import Any

import httpcore._backends.sync
import httpx
import pytest
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from vllm_shared import SharedVllm

from pytest_sskj.subsystems import OPTIONS
from pytest_sskj.testing.plugins import inner_run_addopts

# In-process pytester runs restore ``sys.modules`` afterwards, dropping what they imported; SQLAlchemy's dialect
# modules register functions in a registry that outlives them, so a dialect first imported inside an inner run
# and imported again later warns "GenericFunction ... is already registered" (an error here).  Imported once
# up front, they are never dropped.  httpx likewise: a copy of httpcore imported again after an inner run
# dropped the first raises exception classes httpx's mapping does not know (a raw ``httpcore.ConnectError``
# escapes ``except httpx.HTTPError``: seen in test_runner_store under xdist's ordering).
_PRELOADED = (sqlalchemy.dialects.postgresql, sqlalchemy.dialects.sqlite, httpx, httpcore._backends.sync)

# These machines' environment (and CI's) sets PYTHONDONTWRITEBYTECODE=1: every inner ``python -m pytest``,
# server and tool a test starts then compiles, and assertion-rewrites, every module it imports from source again
# (~2 s of a bare pytest start here: hypothesis', anyio's and xdist's modules are rewritten as entry-point
# plugins).  The test session lets itself and its children cache bytecode (``__pycache__/`` is git-ignored):
# measured ``pytest unit/`` 130 s -> 110 s on this 2-core box.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


class _ReadOnceDistribution(importlib.metadata.Distribution):
    """An installed distribution whose files (``entry_points.txt``, ``RECORD``, ``METADATA``) are read, and whose
    entry points and metadata are parsed, once per test process."""

    def __init__(self, dist: importlib.metadata.Distribution) -> None:
        self._dist = dist
        self._texts: dict[str, str | None] = {}

    def read_text(self, filename: str) -> str | None:
        if filename not in self._texts:
            self._texts[filename] = self._dist.read_text(filename)
        return self._texts[filename]

    def locate_file(self, path: Any) -> Any:
        return self._dist.locate_file(path)

    @functools.cached_property
    def metadata(self) -> Any:
        return self._dist.metadata

    @functools.cached_property
    def entry_points(self) -> importlib.metadata.EntryPoints:
        return self._dist.entry_points

    @property
    def _normalized_name(self) -> Any:
        return getattr(self._dist, "_normalized_name", None)


def _read_installed_distributions_once() -> None:
    """Every in-process pytester session (about 200 in the inner loop) lists the installed distributions twice
    at start-up (pluggy's entry-point plugin load, pytest's marking of plugin modules for assertion rewriting):
    ~40 ms of reading and parsing ``entry_points.txt``/``RECORD`` files per session here, the same files every
    time.  The test process reads them once; the installed set does not change while the suite runs (the
    tests that build distributions build them in a temporary site for a subprocess, never on ``sys.path``).
    Only the unfiltered listing is served from memory; ``distributions(name=...)`` and anything else go to
    ``importlib.metadata`` as usual."""
    original = importlib.metadata.distributions
    once: list[importlib.metadata.Distribution] = []

    def distributions(**kwargs: Any) -> Iterable[importlib.metadata.Distribution]:
        if kwargs:
            return original(**kwargs)
        if not once:
            once.extend(_ReadOnceDistribution(d) for d in original())
        return iter(once)

    importlib.metadata.distributions = distributions


_read_installed_distributions_once()


RUN_SLOW = "--run-slow"
SLOW_HINT = "pytest unit/ --run-slow -m slow"
INNER_ADDOPTS = inner_run_addopts()
"""Inner pytest runs (pytester, ``python -m pytest``) load exactly the plugins the project installs and tests: every
other installed plugin is blocked by name (pytest_sskj/testing/plugins.py; issue 54: pytest-benchmark, installed on
the GPU box, failed 91 self-tests from inside their inner runs)."""


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
    ``--run-slow`` and an xdist worker itself keep pytest's own behaviour.  The slow phase stays serial by
    default: its real vLLM server and its embedded A/B checks of a few milliseconds measure, and two of them
    side by side on a loaded 2-core box came out inconclusive / timed out (measured); ``-n N`` runs it on N
    workers, each with its own network-namespace hosts (:func:`worker_netns_first`).  Runs before xdist's
    ``pytest_cmdline_main`` (a conftest registers after the plugin, so its ``tryfirst`` implementation is called
    first), which turns ``auto`` into the core count.
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


NETNS_STRIDE = 60
"""How far apart the xdist workers' ``SSKJ_NETNS_FIRST`` lie (``pytest unit/ --run-slow -m slow -n N``).  One
instance uses FIRST..FIRST+11 (the SSH launcher's four hosts and the PD test's eight,
unit/deploy/test_pd_over_ssh.py) and FIRST+50..51 (the second-instance test): 60 apart, workers 0..3 never share
a host number and their /24 nets ((FIRST + 190) % 250, tools/netns_hosts.sh) stay distinct.  ``.ci/run`` runs the
twin phase after the slow phase at FIRST+260 (with -n 2 its second worker at +320; nets 61 and 111 for FIRST
601), clear of the serial slow phase's hosts and nets (41, 45, 91)."""


def worker_netns_first(base: int, worker: str) -> int:
    """The ``SSKJ_NETNS_FIRST`` of xdist worker ``gwN``: ``base + N * NETNS_STRIDE`` (``base`` outside xdist)."""
    n = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return base + n * NETNS_STRIDE


def pytest_configure(config: pytest.Config) -> None:
    """The slow tests that only talk to a running vLLM share one (unit/vllm_shared.py).  An xdist worker gets its
    own network-namespace instance: the test modules read ``SSKJ_NETNS_FIRST`` (and ``SSKJ_NETNS_DIR``) when they
    are imported, which is after this, at collection."""
    config.pluginmanager.register(SharedVllm(), "sskj-unit-shared-vllm")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker:
        return
    base = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
    os.environ["SSKJ_NETNS_FIRST"] = str(worker_netns_first(base, worker))
    if os.environ.get("SSKJ_NETNS_DIR"):
        os.environ["SSKJ_NETNS_DIR"] += f"-{worker}"


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
