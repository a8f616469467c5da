"""The ``Launcher`` seam: how a :class:`~pytest_sskj.server.spec.NodeCommand` becomes a process on a node.

This file lists everything the callers (the server pool, the deployment pool, the GPU pre-flight, the
fixtures) use of a launcher and of the handle it returns; nothing else is asked of one:

* :class:`LauncherClass` -- ``from_settings(settings, worker=...)`` builds a launcher for a session;
* :class:`Launcher` -- ``kind``, ``start``, ``start_many``, ``address``, ``run``, ``leftover_pids``, ``close``;
* :class:`ProcessHandle` -- ``node``, ``rank``, ``log_path``, ``log_offset``, ``poll``, ``pids``, ``terminate``;
* :func:`on_each` -- how a caller asks every rank's handle at once (``pids``, ``terminate``): one thread each.

Three kinds implement it: ``local`` (:mod:`pytest_sskj.server.local`, a subprocess in its own session on
this machine), ``ssh`` (:mod:`pytest_sskj.server.ssh`, one rank per node over OpenSSH) and ``container``
(:mod:`pytest_sskj.server.container`, ``docker``/``podman run`` through one of the other two).  Both log
every process to a file under ``<run dir>/logs/<node>/`` and tear down whole process trees.
:func:`get_launcher` picks one by name; an unknown name lists the known kinds.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from pytest_sskj.errors import LauncherError
from pytest_sskj.server.spec import NodeCommand

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "LAUNCHERS",
    "CommandResult",
    "Launcher",
    "LauncherClass",
    "ProcessHandle",
    "StartsEarly",
    "get_launcher",
    "launcher_class",
    "on_each",
    "start_in_order",
]


@dataclass(frozen=True)
class CommandResult:
    """Outcome of a short command run on a node (pre-flight queries, cleanup checks)."""

    node: str
    returncode: int
    stdout: str
    stderr: str


@runtime_checkable
class ProcessHandle(Protocol):
    """One launched long-running process (a rank or a replica) and its process tree."""

    node: str
    rank: int
    log_path: Path
    """Local file that receives the process's stdout and stderr (streamed back for remote nodes)."""
    log_offset: int
    """Byte offset in ``log_path`` where this process's output starts (the file may hold an earlier run's)."""

    def poll(self) -> int | None:
        """Exit code once the process has exited, else ``None``."""
        ...

    def pids(self) -> list[int]:
        """PIDs of the live process tree on its node (empty once everything has exited)."""
        ...

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the whole tree, wait up to ``timeout_s``, then SIGKILL survivors; return the exit code."""
        ...


@runtime_checkable
class Launcher(Protocol):
    """Starts node commands and runs short queries on nodes."""

    kind: str

    def start(self, cmd: NodeCommand, log_path: Path) -> ProcessHandle:
        """Start ``cmd`` on ``cmd.node`` with its env; its output goes to ``log_path``."""
        ...

    def start_many(self, items: Sequence[tuple[NodeCommand, Path]]) -> Sequence[ProcessHandle]:
        """Start several ranks (``(command, log path)`` pairs), in order; a remote launcher opens its
        connections in parallel.  A failure stops what was already started and raises."""
        ...

    def address(self, node: str) -> str:
        """The host a URL or a dist-init address uses for ``node`` (ssh: its ``HostName``; local: ``node``)."""
        ...

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """Run a short command on ``node`` and wait for it."""
        ...

    def leftover_pids(self) -> dict[str, list[int]]:
        """Live PIDs of every process tree this launcher started, by ``node/rank`` (empty: all gone)."""
        ...

    def close(self) -> None:
        """Release launcher resources (connections); processes are stopped through their handles."""
        ...


@runtime_checkable
class StartsEarly(Protocol):
    """An optional capability of a launcher that pins servers to their own cores (the local launcher's CPU
    partition): a server started while nothing is measured (``ServingPool.prepare``) may use the client's
    cores too, then is moved onto its own before anything measures it.  Its start then no longer queues on
    the server core behind the previous server's last work (agreement probes, its stop)."""

    def early(self) -> AbstractContextManager[None]:
        """Starts made on this thread inside the block run on the client's and the server's cores."""
        ...

    def settle(self, handles: Sequence[ProcessHandle]) -> None:
        """Every thread of these trees onto the server's cores; raises ``LauncherError`` if one stays off."""
        ...

    def spread(self, handles: Sequence[ProcessHandle]) -> None:
        """Let these running trees use the client's cores too, until :meth:`settle` (their work is not measured
        meanwhile: a finished point's agreement probes, a spare's warmup); best effort."""
        ...


class LauncherClass(Protocol):
    """A launcher implementation: builds its launcher for a session from the resolved settings."""

    def from_settings(self, settings: Settings, *, worker: str = "") -> Launcher:
        """The session's launcher (``worker``: the xdist worker or deployment group it serves, for file names)."""
        ...


LAUNCHERS: dict[str, str] = {
    "local": "pytest_sskj.server.local:LocalLauncher",
    "ssh": "pytest_sskj.server.ssh:SshLauncher",
    "container": "pytest_sskj.server.container:ContainerLauncher",
}


def launcher_class(kind: str) -> LauncherClass:
    """The implementation of launcher ``kind`` (``local`` or ``ssh``); an unknown name lists the known kinds."""
    try:
        target = LAUNCHERS[kind]
    except KeyError:
        raise LauncherError(f"unknown launcher {kind!r}; known launchers: {', '.join(LAUNCHERS)}") from None
    module, _, name = target.partition(":")
    cls: LauncherClass = getattr(importlib.import_module(module), name)  # a module attribute named by LAUNCHERS
    return cls


def get_launcher(kind: str, **options: object) -> Launcher:
    """Instantiate the launcher ``kind`` (``local`` or ``ssh``) with keyword ``options``."""
    cls = launcher_class(kind)
    launcher = cls(**options)  # type: ignore[operator]
    if not isinstance(launcher, Launcher):  # pragma: no cover - defensive
        raise LauncherError(f"{LAUNCHERS[kind]} does not implement the Launcher protocol")
    return launcher


_H = TypeVar("_H", bound=ProcessHandle)
_T = TypeVar("_T")
_R = TypeVar("_R")


def on_each(fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """``[fn(x) for x in items]`` with one thread per item, results in order, the first exception raised: what
    callers use to ask every rank or node at once (a remote launcher's round trips, ~0.3 s each over ssh
    without a shared connection, overlap instead of adding up)."""
    if len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(32, len(items)), thread_name_prefix="sskj-on-each") as pool:
        return list(pool.map(fn, items))


def start_in_order(start: Callable[[NodeCommand, Path], _H], items: Sequence[tuple[NodeCommand, Path]]) -> list[_H]:
    """``start_many`` for a launcher that starts one rank at a time: every ``(command, log path)`` in order; a
    failure stops what was already started (5 s grace each) and raises."""
    out: list[_H] = []
    try:
        for cmd, log_path in items:
            out.append(start(cmd, log_path))
    except BaseException:
        for h in out:
            h.terminate(5.0)
        raise
    return out
