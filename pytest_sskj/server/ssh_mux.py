"""Connection sharing of the ssh launcher: one OpenSSH master connection per node, every other ``ssh`` rides it.

Without it every query of a node (a rank tree's PIDs, a teardown, a GPU sampler's start) opens its own TCP
connection with a key exchange: ~0.3 s each on an idle 2-core box, ~0.8 s when four nodes are asked at once,
which made ~2.4 s of every serving point's overhead on the four-node stand-in cluster (docs/twin.md).  A
session's ssh commands instead connect to ``<private dir>/%C`` (ssh's ``ControlPath``; the directory is made
0700 by :func:`tempfile.mkdtemp` under ``/tmp``, whose short path keeps the socket name within the 104-byte
limit of a Unix socket) and open a channel of the node's master (a few ms).

- The master is made in the background on a node's first use (which connects directly, as without sharing):
  ``ssh -M -N -f`` with the launcher's own options (it authenticates, then forks into the background;
  ``ControlPersist`` ends it after :data:`PERSIST_S` idle seconds, so a session killed without teardown leaves
  nothing behind for long).  The clients say ``ControlMaster=no``:
  when the master is gone (the idle timeout, a lost connection) or could not be made, ssh connects directly,
  so sharing never fails a command that would have worked without it; a master that is gone is made again on
  the next use (at most :data:`ATTEMPTS` times a node).
- :meth:`SharedConnections.close` ends every master (``ssh -O exit``) and removes the directory: the
  launcher's ``close`` and ``serve start``'s detach call it.
- A user's own ``-o ControlMaster=...`` / ``-o ControlPath=...`` (``--sskj-ssh-option``, or ``SshOptions``)
  turns sharing off: the user's connection setup is used as given.

A command riding a master runs as one of its channels: it ends when its remote session ends or when the master
exits, not when the local ``ssh`` client is killed (the master keeps the channel and the client's pipes), so
``serve start`` ends the connections before it lets go of its ranks' log streams.
A master killed without cleanup leaves its socket behind: ssh then says so and connects directly, and the
launcher has the socket removed (:func:`stale`, :meth:`SharedConnections.forget`) so a new master is made.
The one refusal a channel can meet (sshd's ``MaxSessions``, 10 by default; a session holds one long-lived
channel per rank and per GPU sampler on a node, so a few) is retried by the launcher on its own connection
(:func:`refused`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence

from pytest_sskj.server.launcher import on_each

__all__ = ["ATTEMPTS", "PERSIST_S", "SharedConnections", "refused", "stale", "user_manages"]

PERSIST_S = 60
"""Idle seconds after which a master ends by itself (no channel open)."""
ATTEMPTS = 3
"""How often a node's master is tried (a node whose sshd refuses masters connects directly)."""

_REFUSED = ("mux_client_request_session", "session open refused", "administratively prohibited")


def user_manages(options: Sequence[str]) -> bool:
    """Whether the user's own ``-o`` options set up connection sharing (then ours stays off)."""
    return any(o.split("=")[0].strip().lower() in ("controlmaster", "controlpath") for o in options)


def stale(stderr: str) -> bool:
    """Whether ssh said the master's socket is there but nobody listens (a master killed without cleanup)."""
    return "control socket connect" in stderr.lower()


def refused(returncode: int, stderr: str) -> bool:
    """Whether an ssh exit says the master refused a channel (worth one retry on a direct connection)."""
    low = stderr.lower()
    return returncode == 255 and any(m in low for m in _REFUSED)


class SharedConnections:
    """The masters of one launcher: ``options(node)`` gives the ``-o`` options of a command riding it.

    ``base_argv(node, extra)`` is the launcher's ``ssh [options] [extra] -- node`` (no remote command);
    ``timeout_s`` bounds a master's authentication.  A node's master is made in the background on its first
    use, which connects directly as it would without sharing (an unreachable node fails exactly as before,
    never twice as slowly); later commands ride the master once its socket is there."""

    def __init__(self, base_argv: Callable[[str, Sequence[str]], list[str]], timeout_s: float) -> None:
        self._base_argv = base_argv
        self._timeout_s = timeout_s
        self._dir: str | None = None
        self._sockets: dict[str, str] = {}
        """Node -> its master's socket file (once made)."""
        self._making: dict[str, threading.Thread] = {}
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.closed = False

    def options(self, node: str) -> list[str]:
        """``-o ControlMaster=no -o ControlPath=...`` for a command to ``node`` once its master is up, else
        ``[]`` (a direct connection; the master is made meanwhile, at most :data:`ATTEMPTS` times a node)."""
        with self._lock:
            if self.closed:
                return []
            if self._dir is None:
                self._dir = tempfile.mkdtemp(prefix="sskj-ssh-", dir="/tmp")
            path = os.path.join(self._dir, "%C")
            socket = self._sockets.get(node)
            if socket is not None and os.path.exists(socket):
                return ["-o", "ControlMaster=no", "-o", f"ControlPath={path}"]
            making = self._making.get(node)
            if (making is None or not making.is_alive()) and self._attempts.get(node, 0) < ATTEMPTS:
                self._attempts[node] = self._attempts.get(node, 0) + 1
                t = threading.Thread(target=self._make, args=(node, path), name="sskj-ssh-master", daemon=True)
                self._making[node] = t
                t.start()
        return []

    def forget(self, node: str) -> None:
        """The node's socket is stale (:func:`stale`): removed, so that the next use makes a master again."""
        with self._lock:
            socket = self._sockets.pop(node, None)
        if socket is not None:
            with contextlib.suppress(OSError):
                os.unlink(socket)

    def _make(self, node: str, path: str) -> None:
        socket = self._make_master(node, path)
        if socket is not None:
            with self._lock:
                self._sockets[node] = socket

    def _master_argv(self, node: str, path: str, *extra: str) -> list[str]:
        return self._base_argv(node, [*extra, "-o", f"ControlPath={path}"])

    def _socket(self, node: str, path: str) -> str | None:
        """The node's socket file (ssh names it by a hash of host, port and user: ``-G`` resolves it)."""
        try:
            res = subprocess.run(
                self._master_argv(node, path, "-G"), capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        for line in res.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "controlpath" and value.strip():
                return value.strip()
        return None

    def _make_master(self, node: str, path: str) -> str | None:
        """The node's master, authenticated and in the background: its socket file, or ``None``."""
        socket = self._socket(node, path)
        if socket is None:
            return None
        argv = self._master_argv(node, path, "-M", "-N", "-f", "-o", f"ControlPersist={PERSIST_S}")
        try:
            res = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=self._timeout_s,
                start_new_session=True,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return socket if res.returncode == 0 and os.path.exists(socket) else None

    def close(self) -> None:
        """End every master this launcher made (in parallel, after any still being made) and remove the socket
        directory."""
        with self._lock:
            self.closed = True
            making = list(self._making.values())
        for t in making:
            t.join(self._timeout_s + 5.0)
        if self._dir is None:
            return
        path = os.path.join(self._dir, "%C")

        def end(node: str) -> None:
            try:
                argv = self._master_argv(node, path, "-O", "exit")
                subprocess.run(argv, capture_output=True, timeout=10, check=False)
            except (OSError, subprocess.TimeoutExpired):
                pass  # PERSIST_S ends it once idle

        on_each(end, list(self._sockets))
        shutil.rmtree(self._dir, ignore_errors=True)
        self._dir = None
        self._sockets.clear()
