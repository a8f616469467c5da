"""Repository glue: pytester for the plugin's self-tests (must be a top-level conftest).

Third-party pytest plugins installed beside the project (pytest-benchmark, pytest-asyncio, ...) are foreign
(pytest_sskj/testing/plugins.py): the repository's ``filterwarnings = error`` shows their warnings instead of
raising them, in ``pytest unit/`` and ``pytest acceptance/`` alike (issue 54).

Every ``pytester.popen`` child (``runpytest_subprocess``, ``run``) is started in its own session and
killed, with its whole process group, when the test ends: a Ctrl-C or SIGINT to the outer pytest (which
the child does not receive when it is sent to that process alone) must not leave an inner pytest (and
its servers) running, nor keep the outer one waiting for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_sskj.testing.plugins import foreign_warning_filters

pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Foreign plugins' warnings are shown, not raised: in every later stage through the ini filters that pytest
    reads again for each, and in the rest of the configure stage (a plugin's warning from its own
    ``pytest_configure``, which this runs before) through the filters already in force."""
    distinfo = config.pluginmanager.list_plugin_distinfo()
    loaded = [(getattr(mod, "__name__", ""), dist.project_name) for mod, dist in distinfo]
    for line in foreign_warning_filters(loaded):
        config.addinivalue_line("filterwarnings", line)
        warnings.filterwarnings("default", module=line.split(":", 3)[3])


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> Iterator[pytest.Pytester]:
    children: list[subprocess.Popen[bytes]] = []
    original = pytester.popen

    def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        kwargs.setdefault("start_new_session", True)
        proc = original(*args, **kwargs)
        children.append(proc)
        return proc

    pytester.popen = popen  # type: ignore[method-assign]
    try:
        yield pytester
    finally:
        for proc in children:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(5.0)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(5.0)
