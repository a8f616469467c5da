"""The ``ssh`` launcher: one rank (or replica) per node over the OpenSSH client, torn down as whole remote trees.

:class:`SshLauncher` implements :class:`~pytest_sskj.server.launcher.Launcher`.  ``start`` opens one
``ssh -T node sh -s`` per rank and feeds it a bootstrap script on stdin: the script exports the
node's environment (so values never appear in any argv, process listing or log), creates a private
remote state directory, starts the command with ``setsid`` (its own session; PID = PGID = SID recorded
in ``<state>/pid``), sends its output to ``<state>/out.log`` and streams that file back with
``tail -F`` over the same connection.  A local reader thread writes the stream, secrets redacted, to
the handle's log file (``<run dir>/logs/<node>/rank<r>.log``), so a dropped connection never kills the
server and the remote log survives for post-mortems.  :class:`SshProcess` (the
:class:`~pytest_sskj.server.launcher.ProcessHandle`) answers ``poll`` from the ssh exit status (the
remote exit code, signals as negative numbers), ``pids`` by querying the remote session and its
descendants, and ``terminate`` by SIGTERM -> wait -> SIGKILL of that whole remote tree, verified empty.
A lost connection is healed on the next ``poll``: the stream re-attaches at the last byte received.
The remote shell programs live in :mod:`pytest_sskj.server.remote_sh`.  Connection settings (user,
port, identity, ``-o`` options, an ssh_config file for host aliases like ``601``) come from
:class:`~pytest_sskj.settings.Settings` via :meth:`SshLauncher.from_settings`.
"""

from __future__ import annotations

import os
import re
import secrets as _secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sskj.errors import LauncherError
from pytest_sskj.redact import is_secret_name, redact_argv, redact_text, secret_arg_values
from pytest_sskj.server.launcher import CommandResult, on_each
from pytest_sskj.server.process import communicate_or_kill
from pytest_sskj.server.remote_sh import (
    bootstrap_script,
    pids_script,
    resume_script,
    state_script,
    terminate_script,
)
from pytest_sskj.server.spec import NodeCommand
from pytest_sskj.server.ssh_mux import SharedConnections, refused, stale, user_manages
from pytest_sskj.server.ssh_options import SshOptions, ssh_options_from_settings

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "RemoteState",
    "SshLauncher",
    "SshOptions",
    "SshProcess",
    "bootstrap_script",
    "rank_log_path",
    "ssh_options_from_settings",
]  # bootstrap_script is re-exported from remote_sh; SshOptions, ssh_options_from_settings from ssh_options

_BANNER = re.compile(rb"^\[sskj\] node=\S+ rank=\d+ pid=(\d+) started")
_CLOSING = re.compile(rb"^\[sskj\] node=\S+ rank=\d+ pid=\d+ exited with status (\d+)")
_OWN_LINE = re.compile(rb"^\[sskj\] node=\S+ rank=\d+ ")
_MAX_RESUMES = 20
_SSH_FAILED = 255


def rank_log_path(run_dir: Path, cmd: NodeCommand) -> Path:
    """Where a rank's log is collected: ``<run dir>/logs/<node>/rank<r>.log``."""
    return run_dir / "logs" / cmd.node / f"rank{cmd.rank}.log"


def _exit_code(rc: int) -> int:
    """A shell exit status as a Popen-style code: 128+N (killed by signal N) becomes -N."""
    return -(rc - 128) if 128 < rc < 128 + 65 else rc


@dataclass(frozen=True)
class RemoteState:
    """What a rank's remote state directory says: its PID, exit status (once exited) and liveness."""

    pid: int | None
    rc: int | None
    alive: bool


class SshProcess:
    """A :class:`~pytest_sskj.server.launcher.ProcessHandle` for one rank on a remote node."""

    def __init__(
        self,
        launcher: SshLauncher,
        cmd: NodeCommand,
        log_path: Path,
        state_dir: str,
        proc: subprocess.Popen[bytes],
        secret_values: tuple[str, ...],
    ) -> None:
        self.node = cmd.node
        self.rank = cmd.rank
        self.command = cmd
        self.log_path = log_path
        self.log_offset = 0
        """The streamed copy of the remote log holds this rank's output only."""
        self.state_dir = state_dir
        self.remote_pid: int | None = None
        self._launcher = launcher
        self._proc = proc
        self._secrets = secret_values
        self._started = threading.Event()
        self._lock = threading.Lock()
        self._rc: int | None = None
        self._closing_rc: int | None = None
        self._log_bytes = 0
        """Bytes of the remote ``out.log`` received so far (where a resumed stream continues)."""
        self._partial = b""
        """A line the stream broke off in the middle of (the connection was lost): held back, since a resumed
        stream sends it again from its first byte; written as it is only when no stream resumes."""
        self.resumes = 0
        """How often the log stream was reconnected after the ssh connection was lost."""
        self.terminated = False
        """``True`` once :meth:`terminate` verified that nothing of the tree is left."""
        self._pumps = self._start_pumps(proc)

    # -- log streaming ---------------------------------------------------------------------------------
    def _start_pumps(self, proc: subprocess.Popen[bytes]) -> list[threading.Thread]:
        name = f"sskj-ssh-log-{self.node}-r{self.rank}"
        pumps = [threading.Thread(target=self._copy, args=(proc,), name=name, daemon=True)]
        if proc.stderr is not None:
            pumps.append(threading.Thread(target=self._copy_stderr, args=(proc,), name=name + "-err", daemon=True))
        for t in pumps:
            t.start()
        return pumps

    def _write(self, data: bytes) -> None:
        text = redact_text(data.decode("utf-8", errors="replace"), self._secrets)
        with self._lock, self.log_path.open("ab") as out:
            out.write(text.encode())

    def _copy(self, proc: subprocess.Popen[bytes]) -> None:
        """Copy the remote stream line by line into the local log, secrets redacted, flushing every line (the
        banner line is in the file before :meth:`wait_started` returns)."""
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            if not raw.endswith(b"\n"):  # the connection broke mid-line (EOF): not counted, not written yet
                self._partial = raw
                continue
            if not _OWN_LINE.match(raw):
                self._log_bytes += len(raw)
                self._write(raw)
                continue
            self._write(raw)  # before the start is signalled: once start() returns, the log copy holds the banner
            m = _BANNER.match(raw)
            if m and self.remote_pid is None:
                self.remote_pid = int(m.group(1))
                self._started.set()
            c = _CLOSING.match(raw)
            if c:
                self._closing_rc = int(c.group(1))
        proc.stdout.close()
        self._started.set()

    def _copy_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        """ssh's own messages (connection errors), marked as such, into the same log."""
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            self._write(b"[ssh " + self.node.encode() + b"] " + raw)
        proc.stderr.close()

    def _join_pumps(self, timeout_s: float) -> None:
        for t in self._pumps:
            t.join(timeout=timeout_s)

    def _resume(self) -> None:
        """Reconnect the log stream from where it stopped; its exit status is the rank's, as recorded remotely."""
        self.resumes += 1
        script = resume_script(self.node, self.rank, self.state_dir, self._log_bytes)
        self._join_pumps(2.0)
        self._partial = b""  # the resumed stream starts at this line's first byte
        proc = self._launcher._popen_shell(self.node)
        assert proc.stdin is not None
        try:
            proc.stdin.write(script.encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        self._proc = proc
        self._pumps = self._start_pumps(proc)

    def wait_started(self, timeout_s: float) -> None:
        """Block until the remote side reported the rank's PID; raise :class:`LauncherError` if it did not."""
        self._started.wait(timeout_s)
        if self.remote_pid is not None:
            return
        try:
            rc = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            rc = None
        self._join_pumps(2.0)
        from pytest_sskj.server.process import tail_lines

        tail = "\n".join(f"    | {line}" for line in tail_lines(self.log_path, 10)) or "    | (nothing)"
        self._kill_local()
        probe = shlex.join(redact_argv(self._launcher.ssh.argv(self.node, "true")))
        hint = (
            f"check that `{probe}` works without a password prompt "
            "(--sskj-ssh-user, --sskj-ssh-identity, --sskj-ssh-option, --sskj-ssh-config)"
        )
        what = "did not report the rank's PID" if rc is None else f"ended with exit status {rc}"
        raise LauncherError(
            f"ssh launch of rank {self.rank} on node {self.node} {what} within {timeout_s:g} s; {hint}\n"
            f"  ssh output ({self.log_path}):\n{tail}"
        )

    # -- ProcessHandle -----------------------------------------------------------------------------------
    def poll(self) -> int | None:
        """The rank's exit code (negative: killed by that signal) once it has exited, else ``None``.

        The code comes from the wrapper's closing line.  When the stream ended without it (the ssh
        connection was lost), the remote state decides: the recorded exit status if there is one; while
        the rank still runs the log stream is reconnected (resuming at the last byte) and ``None`` returned.
        """
        if self._rc is not None:
            return self._rc
        rc = self._proc.poll()
        if rc is None:
            return None
        self._join_pumps(2.0)
        if self._closing_rc is not None:
            self._rc = _exit_code(self._closing_rc)
            return self._rc
        state = self._launcher.remote_state(self.node, self.state_dir)
        if not (state.rc is None and state.alive and self.resumes < _MAX_RESUMES) and self._partial:
            self._log_bytes += len(self._partial)  # no stream will send it again: the last words, as they came
            self._write(self._partial + b"\n")
            self._partial = b""
        if state.rc is not None:
            self._rc = _exit_code(state.rc)
            return self._rc
        if state.alive:
            if self.resumes < _MAX_RESUMES:
                self._resume()
            return None
        self._rc = _exit_code(rc)
        return self._rc

    def pids(self) -> list[int]:
        """PIDs of the rank's live remote tree (its session plus descendants), queried on the node.

        After :meth:`terminate` has verified on the node that the tree is empty, nothing of it can come
        back (a tree only grows from its own members), so the answer is ``[]`` without another query.
        """
        if self.terminated:
            return []
        res = self._launcher.shell(self.node, pids_script(self.state_dir))
        if res.returncode != 0:
            raise LauncherError(
                f"could not list the processes of rank {self.rank} on {self.node}: "
                f"ssh exit {res.returncode}: {res.stderr.strip()[-300:]}"
            )
        return sorted(int(p) for p in res.stdout.split() if p.isdigit())

    def terminate(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM every process of the remote tree, wait ``timeout_s``, SIGKILL survivors, verify none is left.

        Raises :class:`LauncherError` naming the survivors when the tree cannot be emptied.
        """
        script = terminate_script(self.state_dir, timeout_s)
        res = self._launcher.shell(self.node, script, timeout_s=timeout_s + 30.0)
        left = res.stdout.split("left:")[-1].split() if "left:" in res.stdout else None
        try:
            self._proc.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            self._kill_local()
        self._join_pumps(5.0)
        if left is None:
            raise LauncherError(
                f"could not stop rank {self.rank} on {self.node}: ssh exit {res.returncode}: "
                f"{res.stderr.strip()[-300:]}; processes may be left (state {self.state_dir})"
            )
        if left:
            raise LauncherError(
                f"rank {self.rank} on {self.node}: processes {' '.join(left)} survived SIGKILL "
                "(uninterruptible sleep? a stuck GPU driver call?); check the node by hand"
            )
        self.terminated = True
        return self.poll()

    def detach(self) -> None:
        """End the local log stream and leave the rank running on its node (``serve start``: the deployment
        outlives this process; the remote state directory keeps its PID, log and exit status).  A stream that
        rides the node's shared connection ends with it: call :meth:`SshLauncher.end_shared_connections` first
        (a killed client alone leaves its remote session, and the pipes the master holds, open)."""
        self._kill_local()
        self._join_pumps(2.0)

    @property
    def launcher(self) -> SshLauncher:
        """The launcher that started this rank."""
        return self._launcher

    # -- helpers -------------------------------------------------------------------------------------------
    def _kill_local(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self._proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - ssh in uninterruptible sleep
                pass

    def __repr__(self) -> str:
        return f"SshProcess(node={self.node!r}, rank={self.rank}, remote_pid={self.remote_pid}, log={self.log_path})"


class SshLauncher:
    """Starts node commands over OpenSSH, one ``ssh`` connection per rank; runs short queries on nodes."""

    kind = "ssh"

    def __init__(
        self,
        *,
        ssh: SshOptions | None = None,
        remote_root: str = "/tmp",
        secrets: Iterable[str] = (),
        start_timeout_s: float | None = None,
        settings: Settings | None = None,
        **options: Any,
    ) -> None:
        if settings is not None and ssh is None:
            ssh = ssh_options_from_settings(settings)
        unknown = sorted(set(options) - set(SshOptions.__dataclass_fields__))
        if unknown:
            raise LauncherError(
                f"unknown ssh launcher option(s) {', '.join(unknown)}; known: "
                f"{', '.join(SshOptions.__dataclass_fields__)}, remote_root, secrets, start_timeout_s, settings"
            )
        if ssh is None:
            ssh = SshOptions(**options)
        self.ssh = ssh
        self.token = f"sskj-{time.strftime('%Y%m%d-%H%M%S')}-{_secrets.token_hex(3)}"
        self.remote_root = remote_root.rstrip("/") or "/tmp"
        # an identity path counts as a secret too: ssh's own messages quoting it are redacted in the logs
        self.secrets = (*secrets, *((str(ssh.identity),) if ssh.identity is not None else ()))
        self.start_timeout_s = start_timeout_s if start_timeout_s is not None else ssh.connect_timeout_s + 20.0
        self.started: list[SshProcess] = []
        self._count = 0
        self._shared = (
            None
            if user_manages(ssh.options)
            else SharedConnections(lambda node, extra: self.ssh.argv(node, extra=extra), ssh.connect_timeout_s + 10.0)
        )
        """One master connection per node that every later ssh rides (:mod:`.ssh_mux`); ``None``: the user's
        own ``ControlMaster``/``ControlPath`` options decide."""

    @classmethod
    def from_settings(cls, settings: Settings, *, worker: str = "") -> SshLauncher:
        """The session's ssh launcher: connection options from the settings (``worker`` names nothing remote)."""
        return cls(ssh=ssh_options_from_settings(settings))

    # -- Launcher ------------------------------------------------------------------------------------------
    def start(self, cmd: NodeCommand, log_path: Path) -> SshProcess:
        """Start ``cmd`` on ``cmd.node`` in its own remote session; stream its output into ``log_path``.

        Returns once the node reported the rank's PID; raises :class:`LauncherError` (with ssh's own
        message and a hint) when the node cannot be reached or the bootstrap fails.
        """
        return self.start_many([(cmd, log_path)])[0]

    def start_many(self, items: Sequence[tuple[NodeCommand, Path]]) -> list[SshProcess]:
        """Start several commands at once (one ssh each, connections opened in parallel), in order.

        If any of them fails to start, the ones that did start are terminated and the first failure raised.
        """
        handles = [self._spawn(cmd, log_path) for cmd, log_path in items]
        errors: list[LauncherError] = []
        for h in handles:
            try:
                h.wait_started(self.start_timeout_s)
            except LauncherError as exc:
                errors.append(exc)
        self.started.extend(h for h in handles if h.remote_pid is not None)
        if errors:
            self.stop_all([h for h in handles if h.remote_pid is not None], 5.0)
            raise errors[0]
        return handles

    def stop_all(self, handles: Sequence[SshProcess], timeout_s: float = 10.0) -> list[int | None]:
        """Terminate several ranks concurrently (one thread each); exit codes in ``handles`` order.

        Every handle is attempted; the first :class:`LauncherError` is raised after all have been tried.
        """

        def stop(h: SshProcess) -> int | LauncherError | None:
            try:
                return h.terminate(timeout_s)
            except LauncherError as exc:
                return exc

        results = on_each(stop, handles)
        for r in results:
            if isinstance(r, LauncherError):
                raise r
        return [r for r in results if not isinstance(r, LauncherError)]

    def _spawn(self, cmd: NodeCommand, log_path: Path) -> SshProcess:
        self._count += 1  # a restarted rank never shares a state directory with its predecessor
        state = f"{self.remote_root}/{self.token}/{_safe(cmd.node)}-rank{cmd.rank}-{self._count}"
        secret_values = (
            *self.secrets,
            *(v for k, v in cmd.env if is_secret_name(k) and v),
            *secret_arg_values(cmd.argv),
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        proc = self._popen_shell(cmd.node)
        handle = SshProcess(self, cmd, log_path, state, proc, secret_values)
        assert proc.stdin is not None
        try:
            proc.stdin.write(bootstrap_script(cmd, state).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass  # ssh already gave up; wait_started reports why
        return handle

    def _argv(self, node: str, *remote: str, shared: bool = True) -> list[str]:
        """``ssh [options] node [remote]``, riding the node's shared connection when there is one."""
        extra = self._shared.options(node) if shared and self._shared is not None else []
        return self.ssh.argv(node, *remote, extra=extra)

    def end_shared_connections(self) -> None:
        """End the nodes' master connections (:meth:`close` does; ``serve start`` after detaching its ranks)."""
        if self._shared is not None:
            self._shared.close()

    def _popen_shell(self, node: str) -> subprocess.Popen[bytes]:
        """``ssh node sh -s`` in its own local session, script to be written on stdin, output piped."""
        try:
            return subprocess.Popen(
                self._argv(node, "sh", "-s"),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise LauncherError(
                f"could not run {self.ssh.ssh!r} for node {node}: {exc}; "
                "install the OpenSSH client (apt-get install openssh-client)"
            ) from exc

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        """Run ``argv`` on ``node`` (as one shell-quoted command line) and wait for it."""
        return self._call(lambda shared: self._argv(node, shlex.join(argv), shared=shared), node, None, timeout_s)

    def shell(self, node: str, script: str, timeout_s: float = 30.0) -> CommandResult:
        """Run a POSIX sh ``script`` on ``node``, fed on stdin (nothing of it appears in a process listing)."""
        return self._call(lambda shared: self._argv(node, "sh", "-s", shared=shared), node, script, timeout_s)

    def close(self) -> None:
        """Remove this launcher's remote state directories of ranks that have exited (logs are local) and end
        the nodes' shared connections."""
        by_node: dict[str, list[str]] = {}
        for h in self.started:
            if h.terminated or h._proc.poll() not in (None, _SSH_FAILED):
                by_node.setdefault(h.node, []).append(h.state_dir)
        root = shlex.quote(self.remote_root + "/" + self.token)
        items = list(by_node.items())
        on_each(lambda it: self.shell(it[0], "rm -rf " + " ".join(shlex.quote(d) for d in it[1]) + "\n", 15.0), items)
        # after every node removed its directories (nodes may share one file system)
        on_each(lambda it: self.shell(it[0], f"rmdir {root} 2>/dev/null; exit 0\n", 15.0), items)
        self.end_shared_connections()

    # -- queries -------------------------------------------------------------------------------------------
    def address(self, node: str) -> str:
        """The address ssh connects to for ``node`` (``HostName`` of ssh_config), for URLs and dist-init."""
        res = self._call(lambda _: [*self.ssh.argv(node)[:-2], "-G", node], node, None, 10.0)
        for line in res.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname" and value.strip():
                return value.strip()
        return node

    def urls(self, commands: Iterable[NodeCommand]) -> list[str]:
        """Base URLs of the HTTP-serving commands (rank 0, or every replica), hosts resolved by :meth:`address`.

        Node names like ``601`` are ssh aliases, not resolvable host names; the URL carries the address
        ssh connects to, so the bench client can reach every replica.
        """
        cache: dict[str, str] = {}
        out = []
        for c in commands:
            if c.serves_http:
                host = cache.setdefault(c.node, self.address(c.node))
                out.append(f"http://{'[' + host + ']' if ':' in host else host}:{c.port}")
        return out

    def remote_state(self, node: str, state_dir: str) -> RemoteState:
        """PID, recorded exit status and liveness of a rank, read from its remote state directory."""
        res = self.shell(node, state_script(state_dir), 15.0)
        vals: dict[str, int] = {}
        for line in res.stdout.splitlines():
            k, _, v = line.partition("=")
            if k in ("pid", "rc", "alive") and v.strip().lstrip("-").isdigit():
                vals[k] = int(v)
        return RemoteState(vals.get("pid"), vals.get("rc"), "alive" in vals)

    def leftover_pids(self) -> dict[str, list[int]]:
        """Live PIDs of every rank tree this launcher started, by ``node/rank`` (empty dict: all gone).

        The nodes are queried in parallel.
        """
        found = on_each(lambda h: h.pids(), self.started)
        return {f"{h.node}/rank{h.rank}": pids for h, pids in zip(self.started, found, strict=True) if pids}

    def _call(
        self, argv_for: Callable[[bool], list[str]], node: str, stdin: str | None, timeout_s: float
    ) -> CommandResult:
        """Run one short ssh command (``argv_for(shared)``); a channel the shared master refused (sshd's
        ``MaxSessions``) is retried once on a connection of its own."""
        res = self._call_once(argv_for(True), node, stdin, timeout_s)
        if self._shared is not None and stale(res.stderr):
            self._shared.forget(node)  # ssh connected directly; the next command makes a new master
        if refused(res.returncode, res.stderr):
            res = self._call_once(argv_for(False), node, stdin, timeout_s)
        return res

    def _call_once(self, argv: list[str], node: str, stdin: str | None, timeout_s: float) -> CommandResult:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                text=True,
            )
        except OSError as exc:
            raise LauncherError(f"could not run {self.ssh.ssh!r}: {exc}; install the OpenSSH client") from exc
        out, err, timed_out = communicate_or_kill(proc, timeout_s, stdin)
        if timed_out:
            return CommandResult(node, -9, out, err + f"\n(ssh to {node} timed out after {timeout_s:g} s; killed)")
        return CommandResult(node, proc.returncode, out, redact_text(err, self.secrets))


def _safe(node: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", node)
