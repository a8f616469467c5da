"""The pytest plugins installed beside pytest-sskj: ours, the dev install's, and *foreign* ones.

A GPU box's Python often ships third-party pytest plugins (pytest-benchmark, pytest-asyncio, pytest-cov,
pytest-randomly, pytest-rerunfailures, ...).  pytest loads every installed ``pytest11`` entry point, so they join
every session: the repository's own (``pytest unit/``, ``pytest acceptance/``) and every inner pytest run of the
self-tests.  Issue 54 measured what that did on the H100 test machine: pytest-benchmark's "disabled because xdist
plugin is active" warning, raised as an error by the repository's ``filterwarnings = error``, failed 91 self-tests
from inside their pytester runs.

So (the repository's conftests use this module):

- an inner pytest run loads exactly the plugins the project installs and tests
  (:data:`OWN_PLUGIN_DISTRIBUTIONS`): :func:`inner_run_addopts` blocks every other installed plugin by its
  entry-point name, which a run's own ``-p no:NAME`` still overrides for ours (a blocked name stays blocked);
- a foreign plugin's warning is shown in the warnings summary, not raised (:func:`foreign_warning_filters`):
  ``filterwarnings = error`` holds the project's code and its dependencies, not other people's plugins.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable
from typing import NamedTuple

OWN_PLUGIN_DISTRIBUTIONS = frozenset({"pytest-sskj", "pytest-xdist", "pytest-timeout", "allure-pytest"})
"""The pytest plugins the project installs and tests (pyproject.toml's dependencies)."""

DEV_PLUGIN_DISTRIBUTIONS = frozenset({"hypothesis", "anyio"})
"""Plugins that come with the project's own dev install (hypothesis from ``[dev]``, anyio with httpx): the suite
uses them as libraries and stays strict about their warnings; inner runs leave them out all the same (loading
them is most of a bare pytest start-up)."""


class InstalledPlugin(NamedTuple):
    name: str
    """The entry-point name, as ``-p NAME`` / ``-p no:NAME`` take it."""
    package: str
    """The top-level package of the entry point's module: the plugin's warnings come from its modules."""
    distribution: str
    """The distribution's normalized name (PEP 503)."""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_plugins() -> list[InstalledPlugin]:
    """Every installed ``pytest11`` entry point outside :data:`OWN_PLUGIN_DISTRIBUTIONS`, sorted by name."""
    found: dict[str, InstalledPlugin] = {}
    for dist in importlib.metadata.distributions():
        dist_name = _normalized(dist.metadata["Name"] or "")
        if dist_name in OWN_PLUGIN_DISTRIBUTIONS:
            continue
        for ep in dist.entry_points:
            if ep.group == "pytest11":
                package = ep.value.split(":")[0].split(".")[0].strip()
                found[ep.name] = InstalledPlugin(ep.name, package, dist_name)
    return sorted(found.values())


def foreign_plugins() -> list[InstalledPlugin]:
    """The installed plugins that neither the project nor its dev install brings."""
    return [p for p in installed_plugins() if p.distribution not in DEV_PLUGIN_DISTRIBUTIONS]


def inner_run_addopts() -> str:
    """``-p no:NAME`` for every installed plugin outside :data:`OWN_PLUGIN_DISTRIBUTIONS` (``PYTEST_ADDOPTS``)."""
    return " ".join(f"-p no:{p.name}" for p in installed_plugins())


def foreign_warning_filters(loaded: Iterable[tuple[str, str]] | None = None) -> list[str]:
    """One ini ``filterwarnings`` line per foreign plugin: its warnings shown (``default``), never raised.

    ``loaded``: (plugin module name, distribution name) of the plugins a session loaded from entry points
    (``config.pluginmanager.list_plugin_distinfo()``: cheap, nothing else is read); default every installed one."""
    if loaded is None:
        packages = {p.package for p in foreign_plugins()}
    else:
        mine = OWN_PLUGIN_DISTRIBUTIONS | DEV_PLUGIN_DISTRIBUTIONS
        packages = {mod.split(".")[0] for mod, dist in loaded if _normalized(dist) not in mine and mod}
    return [f"default::Warning:{re.escape(pkg)}(\\.|$)" for pkg in sorted(packages)]
