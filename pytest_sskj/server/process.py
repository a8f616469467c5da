"""Process hygiene for long-running local processes: spawn, observe and tear down whole process trees.

:class:`ManagedProcess` starts a command in its own session (``start_new_session=True``) with stdout and
stderr appended to one log file (never a pipe), remembers every PID of its tree that it has ever seen
(children, grandchildren, and anything else in the session that outlived its parent), and tears the
tree down as SIGTERM to the process group and every known member -> wait -> SIGKILL to every survivor.
:func:`tail_lines` and :func:`describe_exit` turn an exit into a sentence with the last log lines, so
launch failures say what happened.  psutil is the only helper; nothing here kills by name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

__all__ = ["ManagedProcess", "describe_exit", "session_pids", "tail_lines", "tree_pids"]


def tail_lines(path: Path, n: int = 30, *, max_bytes: int = 256 * 1024) -> list[str]:
    """The last ``n`` lines of ``path`` (reading at most ``max_bytes`` from its end); ``[]`` if unreadable."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > max_bytes and lines:
        lines = lines[1:]  # the first line is probably cut
    return lines[-n:] if n > 0 else []


def describe_exit(what: str, returncode: int | None, log_path: Path, n: int = 20) -> str:
    """``"<what> exited with code 1 (log: path); last 20 log lines: ..."`` (signals named)."""
    if returncode is None:
        code = "is still running"
    elif returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        code = f"was killed by {name} (exit code {returncode})"
    else:
        code = f"exited with code {returncode}"
    tail = tail_lines(log_path, n)
    body = "\n".join(f"    | {line}" for line in tail) if tail else "    | (log is empty)"
    return f"{what} {code} (log: {log_path}); last {len(tail)} log lines:\n{body}"


def tree_pids(root: int) -> list[int]:
    """``root`` and all its live descendants (zombies excluded); empty when ``root`` is gone."""
    try:
        proc = psutil.Process(root)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return []
    out: list[int] = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def session_pids(sid: int) -> list[int]:
    """Live, non-zombie processes whose session id is ``sid`` (catches orphans reparented to init)."""
    out: list[int] = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) != sid:
                continue
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue
        out.append(pid)
    return out


def _alive(pid: int, create_time: float | None) -> bool:
    """Whether ``pid`` still names the same live process (guards against PID reuse)."""
    try:
        p = psutil.Process(pid)
        if create_time is not None and abs(p.create_time() - create_time) > 0.01:
            return False
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class ManagedProcess:
    """One command started in its own session, logging to a file, torn down as a whole tree."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._known: dict[int, float | None] = {}
        with log_path.open("ab") as log:
            # the child keeps its own copy of the descriptor; ours is closed right away
            self.popen = subprocess.Popen(
                list(self.argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                close_fds=True,
            )
        self.pid = self.popen.pid
        self.started_at = time.perf_counter()
        self._remember([self.pid])

    # -- observation ---------------------------------------------------------------------------------
    def _remember(self, pids: Sequence[int]) -> None:
        for pid in pids:
            if pid not in self._known:
                try:
                    self._known[pid] = psutil.Process(pid).create_time()
                except psutil.Error:
                    self._known[pid] = None

    def poll(self) -> int | None:
        """Exit code of the top process once it has exited (reaped), else ``None``."""
        if self.popen.returncode is None:
            self.pids()  # learn about children while the parent is still there
        return self.popen.poll()

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def pids(self) -> list[int]:
        """Every live PID of the tree: descendants of the top process plus session members and known orphans."""
        live = set(tree_pids(self.pid)) | set(session_pids(self.pid))
        self._remember(sorted(live))
        live |= {pid for pid, ct in self._known.items() if _alive(pid, ct)}
        if self.popen.poll() is not None:
            live.discard(self.pid)  # reaped: the number may already belong to someone else
        return sorted(live)

    # -- teardown ------------------------------------------------------------------------------------
    def _signal_all(self, sig: signal.Signals, pids: Sequence[int]) -> None:
        group_live = self.popen.returncode is None
        for pid in pids:
            try:
                group_live = group_live or os.getpgid(pid) == self.pid
            except OSError:
                continue
        if group_live:  # once the group is empty its number may be reused: never signal a stranger's group
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            if pid == os.getpid():
                continue
            if not _alive(pid, self._known.get(pid)):
                continue
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _wait_gone(self, deadline: float) -> list[int]:
        while True:
            self.popen.poll()
            left = self.pids()
            if not left or time.perf_counter() >= deadline:
                return left
            time.sleep(0.02)

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the process group and every known tree member, wait up to ``timeout_s``, SIGKILL survivors.

        Returns the top process's exit code (negative signal number when killed by a signal).
        """
        left = self.pids()
        if left:
            self._signal_all(signal.SIGTERM, left)
            left = self._wait_gone(time.perf_counter() + timeout_s)
        if left:
            self._signal_all(signal.SIGKILL, left)
            left = self._wait_gone(time.perf_counter() + 5.0)
        try:
            return self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process in uninterruptible sleep
            return self.popen.returncode

    def kill(self) -> int | None:
        """SIGKILL the whole tree at once (no grace period)."""
        return self.terminate(timeout_s=0.0)

    def __repr__(self) -> str:
        return f"ManagedProcess(pid={self.pid}, returncode={self.popen.returncode}, log={self.log_path})"
