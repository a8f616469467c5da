"""Process hygiene for long-running local processes: spawn, observe and tear down whole process trees.

:class:`ManagedProcess` starts a command in its own session (``start_new_session=True``) with stdout and
stderr appended to one log file (never a pipe; unless it has secret arguments or environment values, then
a pump thread copies its output into the log through the redactor, since servers echo their arguments),
remembers every PID of its tree that it has ever seen
(children, grandchildren, and anything else in the session that outlived its parent), and tears the
tree down as SIGTERM to the top process alone (a server that stops its own children in order -- vLLM's API
server before its EngineCore -- exits cleanly; a group SIGTERM reaches all of them at once and vLLM's API
server then logs ``EngineDeadError`` on a healthy shutdown) -> up to half the grace period for it to exit ->
SIGTERM to the process group and every known member -> wait -> SIGKILL to every survivor.
:func:`tail_lines` and :func:`describe_exit` turn an exit into a sentence with the last log lines, so
launch failures say what happened.  psutil is the only helper; nothing here kills by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

__all__ = [
    "ManagedProcess",
    "Reaper",
    "communicate_or_kill",
    "describe_exit",
    "main",
    "session_pids",
    "tail_lines",
    "tree_pids",
]


def communicate_or_kill(
    proc: subprocess.Popen[str], timeout_s: float, stdin: str | None = None
) -> tuple[str, str, bool]:
    """Wait for a short command started in its own session; on timeout SIGKILL its whole process group.

    Returns ``(stdout, stderr, timed_out)``.
    """
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return out, err, True
    return out, err, False


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


LEARN_INTERVAL_S = 2.0
"""How often :meth:`ManagedProcess.poll` walks the tree to learn the children (a walk reads every process of the
machine for the session scan: at the watch loop's 4 polls a second it took ~4 % of a 2-core box during a run,
measured).  An orphan in the rank's session is found again at teardown by that scan; only a child that left the
session within these 2 s and outlived its parent would be missed."""


class ManagedProcess:
    """One command started in its own session, logging to a file, torn down as a whole tree."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        secrets: Sequence[str] = (),
        cpus: Sequence[int] = (),
        detached_pump: bool = False,
    ) -> None:
        """``cpus``: pin the process (before ``exec``; its threads and children inherit it) to these cores.
        ``detached_pump``: with ``secrets``, the redacting log pump is a process of its own session
        (:mod:`pytest_sskj.server.logpump`) that outlives this one, not a thread of it (``serve start``)."""
        self.argv = tuple(argv)
        self.cpus = tuple(cpus)
        self.secrets = tuple(s for s in secrets if s)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        from pytest_sskj.server.cpus import spawning_on
        from pytest_sskj.server.secret_argv import hide_secret_args

        # secret arguments go through a private file (or the environment), never the visible command line
        launch = hide_secret_args(self.argv, log_path.parent / ".private")
        self.private_file = launch.private_file
        if launch.env:
            env = {**(os.environ if env is None else env), **dict(launch.env)}
        self._known: dict[int, float | None] = {}
        self._learned_at = -LEARN_INTERVAL_S
        """When :meth:`poll` last walked the tree to learn children (``time.monotonic``)."""
        self._done = False
        self.pump_process: subprocess.Popen[bytes] | None = None
        out_w = self._start_pump_process(log_path) if self.secrets and detached_pump else None
        with log_path.open("ab") as log, spawning_on(self.cpus):
            self.log_offset = log.tell()
            """Size of the log before this process wrote to it (a reused log file is appended to)."""
            # the child keeps its own copy of the descriptor; ours is closed right away
            self.popen = subprocess.Popen(
                list(launch.argv),
                stdin=subprocess.DEVNULL,
                stdout=out_w if out_w is not None else (subprocess.PIPE if self.secrets else log),
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=str(cwd) if cwd else None,
                start_new_session=True,
                close_fds=True,  # the whole tree starts on its cores: this thread is on them (spawning_on)
            )
        if out_w is not None:
            os.close(out_w)  # the child holds the write end; the pump process the read end
        self.pump: threading.Thread | None = None
        if self.secrets and out_w is None:
            self.pump = threading.Thread(target=self._pump, name=f"sskj-log-{self.popen.pid}", daemon=True)
            self.pump.start()
        self.pid = self.popen.pid
        self.started_at = time.perf_counter()
        self._remember([self.pid])

    def _start_pump_process(self, log_path: Path) -> int:
        """Start the detached pump on a new pipe; return the pipe's write end for the child's output."""
        import sys

        from pytest_sskj.server.secret_argv import write_private_json

        secrets_file = write_private_json(log_path.parent / ".private", "pump-", list(self.secrets))
        r, w = os.pipe()
        try:
            self.pump_process = subprocess.Popen(
                [sys.executable, "-m", "pytest_sskj.server.logpump", str(log_path), str(secrets_file)],
                stdin=r, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError:
            os.close(w)
            secrets_file.unlink(missing_ok=True)
            raise
        finally:
            os.close(r)
        return w

    def _pump(self) -> None:
        """Copy the child's output line by line into the log, secret values redacted, flushing every line."""
        from pytest_sskj.server.logpump import pump

        assert self.popen.stdout is not None
        pump(self.popen.stdout, self.log_path, self.secrets)
        self.popen.stdout.close()

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
        now = time.monotonic()
        if self.popen.returncode is None and now - self._learned_at >= LEARN_INTERVAL_S:
            self._learned_at = now
            self.pids()  # learn about children while the parent is still there
        rc = self.popen.poll()
        if rc is not None:
            self._drop_private_file()
        return rc

    def _drop_private_file(self) -> None:
        """The private argv file is deleted by the child as it starts; this covers a child that died first."""
        if self.private_file is not None:
            self.private_file.unlink(missing_ok=True)
            self.private_file = None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def pids(self) -> list[int]:
        """Every live PID of the tree: descendants of the top process plus session members and known orphans."""
        if self._done:
            return []
        live = set(tree_pids(self.pid)) | set(session_pids(self.pid))
        self._remember(sorted(live))
        live |= {pid for pid, ct in self._known.items() if _alive(pid, ct)}
        if self.popen.poll() is not None:
            live.discard(self.pid)  # reaped: the number may already belong to someone else
            if not live:
                # the session is empty, so its id may be reused by a stranger's setsid(): never look again
                self._done = True
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
        pause = 0.002  # a tree exits a few ms after its signal: look again soon, then less often (<= 20 ms)
        while True:
            self.popen.poll()
            left = self.pids()
            if not left or time.perf_counter() >= deadline:
                return left
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _leader_first(self, until: float) -> bool:
        """SIGTERM the top process alone and wait until it exits or ``until``; whether it was signalled."""
        if self.popen.poll() is not None:
            return False
        try:
            os.kill(self.pid, signal.SIGTERM)
            os.kill(self.pid, signal.SIGCONT)  # a stopped (SIGSTOP, hung) leader acts on SIGTERM only then
        except (ProcessLookupError, PermissionError):
            return False
        # Popen.wait polls from 0.5 ms on (doubling, <= 50 ms): an exit a few ms after SIGTERM is seen within
        # ~1 ms, not at the next 20 ms tick (a stop is waited for between two measured phases)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=max(0.0, until - time.perf_counter()))
        return True

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM the top process, then (after it exited, or half of ``timeout_s``) the process group and
        every known tree member; wait up to ``timeout_s`` in all, then SIGKILL survivors.

        Returns the top process's exit code (negative signal number when killed by a signal).
        """
        deadline = time.perf_counter() + timeout_s
        self._drop_private_file()
        left = self.pids()
        if left and timeout_s > 0 and self._leader_first(deadline - timeout_s / 2):
            left = self.pids()
        if left:
            self._signal_all(signal.SIGTERM, left)
            self._signal_all(signal.SIGCONT, left)  # a stopped (SIGSTOP, hung) process acts on SIGTERM only then
            left = self._wait_gone(deadline)
        if left:
            self._signal_all(signal.SIGKILL, left)
            left = self._wait_gone(time.perf_counter() + 5.0)
        try:
            rc = self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired:  # pragma: no cover - a process in uninterruptible sleep
            return self.popen.returncode
        if self.pump is not None:
            self.pump.join(5.0)
        if self.pump_process is not None:
            try:
                self.pump_process.wait(timeout=5.0)  # the tree is gone: the pipe is at its end
            except subprocess.TimeoutExpired:  # pragma: no cover - a grandchild outside the tree holds the pipe
                self.pump_process.kill()
        return rc

    def kill(self) -> int | None:
        """SIGKILL the whole tree at once (no grace period)."""
        return self.terminate(timeout_s=0.0)

    def __repr__(self) -> str:
        return f"ManagedProcess(pid={self.pid}, returncode={self.popen.returncode}, log={self.log_path})"


# --- the reaper: teardown that survives the death of the pytest process --------------------------------


class Reaper:
    """A watchdog process that tears down registered trees if this (pytest) process dies without doing it.

    ``pytest-timeout``'s thread method ends the process with ``os._exit``, and SIGKILL gives no chance to
    clean up; servers live in their own sessions, so they would survive.  The reaper runs
    ``python -m pytest_sskj.server.process reap`` in its own session; it polls this process every
    ``poll_s`` and, once it is gone, SIGTERMs then SIGKILLs every registered tree.  ``close()`` (normal
    teardown) stops it without reaping.  The registry is a small JSON file next to the logs.
    """

    def __init__(self, state_path: Path, *, poll_s: float = 0.5) -> None:
        self.state_path = state_path
        self.poll_s = poll_s
        self.entries: dict[int, float | None] = {}
        self.watchdog: ManagedProcess | None = None

    def _write(self) -> None:
        import json

        from pytest_sskj.rundir import atomic_write_text

        atomic_write_text(self.state_path, json.dumps({"pids": [[p, ct] for p, ct in self.entries.items()]}))

    def register(self, proc: ManagedProcess) -> None:
        """Have ``proc``'s tree (its session) reaped should this process die."""
        self.entries[proc.pid] = proc._known.get(proc.pid)
        self._write()
        if self.watchdog is None or self.watchdog.poll() is not None:
            import sys

            me = psutil.Process()
            argv = [
                sys.executable,
                "-m",
                "pytest_sskj.server.process",
                "reap",
                "--parent",
                str(me.pid),
                "--parent-created",
                repr(me.create_time()),
                "--state",
                str(self.state_path),
                "--poll",
                str(self.poll_s),
            ]
            self.watchdog = ManagedProcess(argv, self.state_path.with_suffix(".log"))

    def close(self) -> None:
        """Normal teardown happened: stop the watchdog without reaping anything."""
        if self.watchdog is not None:
            self.watchdog.terminate(5.0)
        self.entries.clear()
        try:
            self.state_path.unlink()
        except OSError:
            pass


def _reap(parent: int, created: float, state: Path, poll_s: float) -> int:
    import json

    while _alive(parent, created):
        time.sleep(poll_s)
    try:
        entries = json.loads(state.read_text())["pids"]
    except (OSError, ValueError, KeyError):
        return 0
    victims: dict[int, float | None] = {}
    for pid, ct in entries:
        if _alive(int(pid), ct):
            victims[int(pid)] = ct
        for p in set(tree_pids(int(pid))) | set(session_pids(int(pid))):
            victims.setdefault(p, None)
    print(f"sskj-reaper: pytest (pid {parent}) is gone; stopping {sorted(victims)}", flush=True)  # noqa: T201
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid, ct in victims.items():
            if _alive(pid, ct):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        deadline = time.perf_counter() + wait_s
        while any(_alive(p, ct) for p, ct in victims.items()) and time.perf_counter() < deadline:
            time.sleep(0.05)
    left = [p for p, ct in victims.items() if _alive(p, ct)]
    print(f"sskj-reaper: done; still running: {left or 'none'}", flush=True)  # noqa: T201
    return 1 if left else 0


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m pytest_sskj.server.process")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reap", help="wait for --parent to exit, then stop the trees listed in --state")
    r.add_argument("--parent", type=int, required=True)
    r.add_argument("--parent-created", type=float, required=True)
    r.add_argument("--state", type=Path, required=True)
    r.add_argument("--poll", type=float, default=0.5)
    a = ap.parse_args(argv)
    return _reap(a.parent, a.parent_created, a.state, a.poll)


if __name__ == "__main__":
    raise SystemExit(main())
