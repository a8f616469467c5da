"""Repository glue: pytester for the plugin's self-tests (must be a top-level conftest).

Every ``pytester.popen`` child (``runpytest_subprocess``, ``run``) is started in its own session and
killed, with its whole process group, when the test ends: a Ctrl-C or SIGINT to the outer pytest (which
the child does not receive when it is sent to that process alone) must not leave an inner pytest (and
its servers) running, nor keep the outer one waiting for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["pytester"]


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
