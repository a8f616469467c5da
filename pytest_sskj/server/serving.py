"""The serving seam: what the acceptance runner and the fixtures use of a running deployment and its pool.

Two implementations: one server (:class:`~pytest_sskj.server.pool.RunningServer` from
:class:`~pytest_sskj.server.pool.ServerPool`; also an external ``--target-url`` server) and a whole
deployment of groups behind a router (:class:`~pytest_sskj.deploy.pool.RunningDeployment` from
:class:`~pytest_sskj.deploy.pool.DeploymentPool`).  Callers ask only what is listed here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.logscan import Finding
from pytest_sskj.server.spec import NodeCommand, ServerSpec

__all__ = ["Serving", "ServingPool"]


class Serving(Protocol):
    """A healthy deployment of one spec: where to send requests, its commands and logs, its health."""

    spec: ServerSpec
    urls: list[str]
    """Base URLs the client sends to (rank 0, every replica, or the router)."""
    commands: list[NodeCommand]
    external: bool
    """Launched elsewhere (``--target-url``): no processes, no logs, no config re-check."""

    @property
    def log_paths(self) -> Mapping[str, Path]:
        """Every process's log file, by ``node/rank`` (``group:node/rank``, ``router`` in a deployment)."""
        ...

    def mark(self) -> Any:
        """The current position in every log; pass it to :meth:`findings_since`."""
        ...

    def findings_since(self, mark: Any = None) -> list[Finding]:
        """Log-oracle findings after ``mark`` on every node."""
        ...

    def log_tail(self, n: int = 30) -> dict[str, list[str]]:
        """The last ``n`` lines of every process's log, redacted, by the keys of :attr:`log_paths`."""
        ...

    def pids(self) -> dict[str, list[int]]:
        """Live PIDs of every process's tree, by ``node/rank`` (a deployment's router: ``<node>/router``)."""
        ...

    def check_alive(self) -> None:
        """Raise :class:`~pytest_sskj.errors.ServerCrashed` when a process died or a fatal line was logged."""
        ...

    def server_info(self) -> dict[str, Any] | None:
        """The effective config read at start where the engine verifies it, else ``None``."""
        ...

    def config_problems(self) -> list[str]:
        """Ask the live server(s) *now* what they run against the spec; problems as sentences."""
        ...


class ServingPool(Protocol):
    """One per session: starts, reuses and stops deployments."""

    def get(self, spec: ServerSpec) -> Serving:
        """The running deployment for ``spec`` (started on first use); raises ``ServerError`` subclasses."""
        ...

    def stop(self, spec: ServerSpec) -> None:
        """Stop the deployment of ``spec`` (every process tree on every node)."""
        ...

    def prepare(
        self, spec: ServerSpec, then: Callable[[Serving], None] | None = None, *, ahead: ServerSpec | None = None
    ) -> None:
        """Start ``spec`` early, while nothing is measured, where the engine allows two deployments at once
        (a no-op elsewhere); the next ``get(spec)`` returns it.  ``then`` is called with it once it is healthy,
        on the preparing thread, before that ``get`` returns (the runner sends the next point's warmup there);
        what ``then`` raises is logged, never raised by ``get``.  ``ahead``: the spec asked for after
        ``spec``, which may be started now too and kept idle (unwarmed) until a later ``prepare``/``get`` of
        it.  Nothing prepared runs while a server is in use: every ``get`` first waits for all of it."""
        ...

    @property
    def launcher(self) -> Launcher | None:
        """What starts processes on the deployment's nodes (telemetry samplers run through it); ``None``: none
        (an external server, a test double)."""
        ...
