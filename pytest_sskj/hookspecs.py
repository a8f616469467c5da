"""Hook specifications of pytest-sskj (``pytest_sskj_*``), for site conftests and other plugins.

Value hooks are ``firstresult``: the first implementation that returns non-``None`` wins, and the
built-in behaviour is the fallback.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_sskj.server.pool import Prelaunch
    from pytest_sskj.server.spec import NodeCommand, ServerSpec


@pytest.hookspec(firstresult=True)
def pytest_sskj_server_commands(config: pytest.Config, spec: ServerSpec) -> list[NodeCommand] | None:
    """Return the per-node commands for ``spec`` (rank 0 first) to replace the built-in builder.

    Example, wrapping every rank in the site's container runner::

        def pytest_sskj_server_commands(config, spec):
            from pytest_sskj.engines import node_commands
            return [c.__class__(c.node, c.rank, ("docker", "exec", "serving", *c.argv), c.env, c.serves_http, c.port)
                    for c in node_commands(spec)]
    """


@pytest.hookspec(firstresult=True)
def pytest_sskj_server_prelaunch(config: pytest.Config) -> Prelaunch | None:
    """Return the server pool's pre-launch callable (``(spec, launcher) -> (extra env, release)``): GPU leases
    for local servers, node pre-flight for remote ones.  The GPU plugin implements it, so that the server
    layer never imports the GPU layer; ``None`` everywhere: servers launch without a pre-launch step."""


@pytest.hookspec(firstresult=True)
def pytest_sskj_gpu_inventory(config: pytest.Config) -> Any | None:
    """Return the GPU inventory of this host (an ``Inventory``) to replace the NVML reader."""


@pytest.hookspec
def pytest_sskj_point_finished(config: pytest.Config, result: dict[str, Any]) -> None:
    """Called with the result row of every finished serving point (one repeat); reporters listen here."""


@pytest.hookspec
def pytest_sskj_verdict(config: pytest.Config, verdict: dict[str, Any]) -> None:
    """Called with every A/B comparison, chunk-curve or concurrency-search verdict (``verdict["kind"]``)."""
