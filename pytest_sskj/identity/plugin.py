"""The identity sub-plugin: every server's pre-launch step probes and compares its nodes' builds first.

It wraps whatever ``pytest_sskj_server_prelaunch`` implementation answers (the GPU plugin's leases and node
pre-flight), so the server layer asks one hook and imports neither the GPU nor the identity layer.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_sskj.identity.record import Prelaunch, session_prelaunch


@pytest.hookimpl(wrapper=True)
def pytest_sskj_server_prelaunch(config: pytest.Config) -> Generator[None, Prelaunch | None, Prelaunch]:
    inner = yield
    return session_prelaunch(config, inner)
