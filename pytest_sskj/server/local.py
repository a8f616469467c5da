"""The ``local`` launcher: every node command becomes a :class:`~pytest_sskj.server.process.ManagedProcess` here.

It implements :class:`~pytest_sskj.server.launcher.Launcher`: ``start`` spawns the command in its own
session with the node's environment layered over this process's environment, stdout and stderr going to
the given log file; the returned :class:`LocalProcess` is the
:class:`~pytest_sskj.server.launcher.ProcessHandle`.  ``run`` executes short commands (pre-flight
checks).  The launcher remembers every process it started, so :meth:`LocalLauncher.leftover_pids` can
prove that teardown left nothing behind.

With a :class:`~pytest_sskj.server.cpus.CpuPartition` (``--sskj-cpu-partition auto``, the default of
:meth:`LocalLauncher.from_settings`), the first ``start`` pins this process (the benchmark client) to the client's
core, every started tree to the server's cores (``VLLM_CPU_OMP_THREADS_BIND`` told them too), and raises this
process's autogroup priority; ``close`` gives both back.  It also
:class:`~pytest_sskj.server.launcher.StartsEarly`: a start inside :meth:`LocalLauncher.early` (the pool's
prepared start, while nothing is measured) runs on the client's core too, and :meth:`LocalLauncher.settle`
moves every thread of the tree onto the server's cores before the server is handed out.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_sskj.errors import LauncherError
from pytest_sskj.nodes import is_local_node
from pytest_sskj.server import cpus as cpu_partition
from pytest_sskj.server.launcher import CommandResult, ProcessHandle, start_in_order
from pytest_sskj.server.process import ManagedProcess, Reaper, communicate_or_kill
from pytest_sskj.server.spec import NodeCommand

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["LocalLauncher", "LocalProcess"]


class LocalProcess:
    """A :class:`ProcessHandle` for one local rank or replica."""

    def __init__(self, cmd: NodeCommand, proc: ManagedProcess) -> None:
        self.node = cmd.node
        self.rank = cmd.rank
        self.command = cmd
        self.log_path = proc.log_path
        self.log_offset = proc.log_offset
        self.proc = proc

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def pids(self) -> list[int]:
        return self.proc.pids()

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        return self.proc.terminate(timeout_s)

    def __repr__(self) -> str:
        return f"LocalProcess(node={self.node!r}, rank={self.rank}, pid={self.pid}, log={self.log_path})"


class _EarlyFlag(threading.local):
    """Per thread: whether its starts are early ones (:meth:`LocalLauncher.early`)."""

    on = False


class LocalLauncher:
    """Runs node commands as subprocesses of this machine (node names must be local)."""

    kind = "local"

    def __init__(
        self,
        *,
        cwd: Path | None = None,
        inherit_env: bool = True,
        reaper_state: Path | None = None,
        partition: cpu_partition.CpuPartition | None = None,
        detached_pump: bool = False,
    ) -> None:
        self.cwd = cwd
        self.detached_pump = detached_pump
        """A rank with secrets logs through a pump process that outlives this one (``serve start``)."""
        self.partition = partition
        """Client / server cores of this launch (``None`` or not ``pinned``: nothing is pinned)."""
        self.client_priority = ""
        """What :func:`~pytest_sskj.server.cpus.raise_autogroup_priority` did (set on the first pinned start)."""
        self._unpin: dict[int, tuple[int, ...]] | None = None
        self._autogroup_before: int | None = None
        self.inherit_env = inherit_env
        self.started: list[LocalProcess] = []
        self.reaper = Reaper(reaper_state) if reaper_state is not None else None
        """With ``reaper_state``, a watchdog stops every started tree should this process die first."""
        self._early = _EarlyFlag()
        """``on`` while this thread is inside :meth:`early`."""

    @classmethod
    def from_settings(cls, settings: Settings, *, worker: str = "") -> LocalLauncher:
        """The session's local launcher, with a reaper watchdog whose state file is named by run and worker."""
        tag = f"-{worker}" if worker else ""
        return cls(
            reaper_state=settings.reports_dir / ".cache" / "reaper" / f"{settings.run_id}{tag}.json",
            partition=cpu_partition.plan_partition(settings.cpu_partition, settings.run_cpus or None),
        )

    def _pin_client(self) -> tuple[int, ...]:
        """The server's cores, pinning this process to the client's on the first call (``()``: not pinned)."""
        part = self.partition
        if part is None or not part.pinned:
            return ()
        if self._unpin is None:
            self._unpin = cpu_partition.pin_this_process(part.client)
            self.client_priority, self._autogroup_before = cpu_partition.raise_autogroup_priority()
        return part.server

    def _check_node(self, node: str) -> None:
        if not is_local_node(node):
            raise LauncherError(
                f"the local launcher runs commands on this machine only, but the command is for node {node!r}; "
                "use --launcher ssh for remote nodes"
            )

    def _env(self, cmd_env: Sequence[tuple[str, str]]) -> dict[str, str]:
        env = dict(os.environ) if self.inherit_env else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        env.update(dict(cmd_env))
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start(self, cmd: NodeCommand, log_path: Path) -> LocalProcess:
        """Start ``cmd`` here in its own session; stdout and stderr go to ``log_path`` (appended)."""
        self._check_node(cmd.node)
        server_cpus = self._pin_client()
        spawn_cpus = server_cpus
        if server_cpus and self.partition is not None and self._early.on:
            spawn_cpus = tuple(sorted({*server_cpus, *self.partition.client}))  # settle() moves it later
        env = self._env(cmd.env)
        if server_cpus:
            given = {k for k, _ in cmd.env} | set(os.environ)  # the user's own binding wins
            bind = cpu_partition.format_cpus(server_cpus)
            env.update({k: bind for k in cpu_partition.SERVER_BIND_ENV if k not in given})
        try:
            proc = ManagedProcess(cmd.argv, log_path, env=env, cwd=self.cwd, secrets=_secrets_of(cmd), cpus=spawn_cpus,
                                  detached_pump=self.detached_pump)  # fmt: skip
        except OSError as exc:
            raise LauncherError(
                f"could not start {cmd.argv[0]!r} for node {cmd.node} rank {cmd.rank}: {exc}; "
                "check that the program exists on PATH (or give --sskj-python)"
            ) from exc
        handle = LocalProcess(cmd, proc)
        self.started.append(handle)
        if self.reaper is not None:
            self.reaper.register(proc)
        return handle

    @contextlib.contextmanager
    def early(self) -> Iterator[None]:
        """Starts made on this thread inside the block may also use the client's core (nothing is measured)."""
        self._early.on = True
        try:
            yield
        finally:
            self._early.on = False

    def settle(self, handles: Sequence[ProcessHandle]) -> None:
        """Move every thread of ``handles``' trees onto the server's cores (a no-op when nothing is pinned)."""
        part = self.partition
        if part is None or not part.pinned:
            return
        off = cpu_partition.pin_tree([pid for h in handles for pid in h.pids()], part.server)
        if off:
            raise LauncherError(
                f"could not move the server's threads onto its cores {cpu_partition.format_cpus(part.server)}: "
                + ", ".join(off[:5])
            )

    def spread(self, handles: Sequence[ProcessHandle]) -> None:
        """Every thread of ``handles``' trees onto the client's and the server's cores (a no-op when nothing is
        pinned); :meth:`settle` moves them back before anything measures them."""
        part = self.partition
        if part is None or not part.pinned:
            return
        cpu_partition.pin_tree([pid for h in handles for pid in h.pids()], (*part.server, *part.client))

    def start_many(self, items: Sequence[tuple[NodeCommand, Path]]) -> list[LocalProcess]:
        """Start every ``(command, log path)`` in order; a failure stops what was already started."""
        return start_in_order(self.start, items)

    def address(self, node: str) -> str:
        """A local node is reached under its own name (URLs of local nodes use ``127.0.0.1``)."""
        return node

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """Run a short command here and wait for it (its own session; killed whole on timeout)."""
        self._check_node(node)
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            text=True,
            env=self._env(()),
            cwd=str(self.cwd) if self.cwd else None,
        )
        out, err, timed_out = communicate_or_kill(proc, timeout_s)
        if timed_out:
            return CommandResult(node, -9, out, err + f"\n(timed out after {timeout_s:g} s and was killed)")
        return CommandResult(node, proc.returncode, out, err)

    def leftover_pids(self) -> dict[str, list[int]]:
        """Live PIDs of every process tree this launcher started, by ``node/rank`` (empty dict: all gone)."""
        out: dict[str, list[int]] = {}
        for h in self.started:
            pids = h.pids()
            if pids:
                out[f"{h.node}/rank{h.rank}"] = pids
        return out

    def close(self) -> None:
        """Stop the reaper watchdog (processes themselves are stopped through their handles); unpin the client."""
        if self.reaper is not None:
            self.reaper.close()
        if self._unpin is not None:
            cpu_partition.restore(self._unpin)
            cpu_partition.restore_autogroup(self._autogroup_before)
            self._unpin, self._autogroup_before = None, None


def _secrets_of(cmd: NodeCommand) -> tuple[str, ...]:
    """Secret values of a command (``--api-key V`` style arguments, secret-named environment values)."""
    from pytest_sskj.redact import is_secret_name, secret_arg_values

    return (*secret_arg_values(cmd.argv), *(v for k, v in cmd.env if is_secret_name(k) and v))
