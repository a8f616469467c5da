"""Whether a pytest session records a run: the one seam every writer of run clutter asks.

A session *records* (a run directory under ``--reports-dir`` with its manifest, ``outcomes.json``,
``summary.md``; results-database records; the ``sskj: run ...`` header) unless it is a self-test session
given no run id: every path it collects lies inside the project's self-test directory (``<rootdir>/unit``,
:data:`SELF_TEST_DIRS`; ``pytest`` with no paths collects ``testpaths``, which is ``unit``) and neither
``--run-id`` nor ``SSKJ_RUN_ID`` / ``sskj_run_id`` named its run.  Such a session cannot collect an
acceptance test, so it leaves nothing behind.  Naming the run id is how a self-test run is kept for
``release mark`` (``.ci/run`` and the README run ``SSKJ_RUN_ID=... pytest unit/``): that run is recorded as
any other, its outcomes judged like an acceptance run's.

Callers: :func:`records` (after ``pytest_configure``); the foundation stores the decision once
(:func:`decide`) under :data:`pytest_sskj.stash.RECORDED_KEY`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.settings import Settings
from pytest_sskj.stash import RECORDED_KEY

__all__ = ["SELF_TEST_DIRS", "decide", "records"]

SELF_TEST_DIRS = ("unit",)
"""Directories (relative to the rootdir) holding the project's self-tests, never acceptance tests."""

_NAMED = ("cli", "env", "ini")


def _inside_self_tests(config: pytest.Config) -> bool:
    root = Path(str(config.rootpath)).resolve()
    dirs = [root / d for d in SELF_TEST_DIRS if (root / d).is_dir()]
    if not dirs:
        return False
    base = Path(config.invocation_params.dir)
    args = list(config.args) or ["."]
    for arg in args:
        path = (base / str(arg).split("::", 1)[0]).resolve()
        if not any(path == d or d in path.parents for d in dirs):
            return False
    return True


def decide(config: pytest.Config, settings: Settings) -> bool:
    """Whether this session records a run (see the module docstring); stored for :func:`records`."""
    named = settings.sources.get("run_id") in _NAMED or settings.sources.get("resume") in _NAMED
    recorded = named or not _inside_self_tests(config)
    config.stash[RECORDED_KEY] = recorded
    return recorded


def records(config: pytest.Config) -> bool:
    """The stored decision (``True`` before it was taken: a session records unless told otherwise)."""
    return config.stash.get(RECORDED_KEY, True)
