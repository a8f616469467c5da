"""Checking and stopping a deployment's process trees from a process that did not start them.

``serve start`` leaves every rank running and exits; ``serve status`` and ``serve stop`` (another process,
maybe days later) find each rank again from its :class:`~pytest_sskj.serve.state.RankState`: a local rank by
its session leader's PID and start time (a reused PID is not mistaken for it) plus its session and
descendants, an ssh rank through its remote state directory (:mod:`pytest_sskj.server.remote_sh`'s
scripts over a fresh :class:`~pytest_sskj.server.ssh.SshLauncher`).  A container rank is also removed by
name (``<runtime> rm -f``) on its node.  Nothing is ever killed by name.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from pytest_sskj.serve.state import RankState
from pytest_sskj.server.process import session_pids, tree_pids
from pytest_sskj.server.remote_sh import pids_script, terminate_script
from pytest_sskj.server.ssh import SshLauncher

__all__ = ["RankLiveness", "liveness", "stop_rank"]


@dataclass(frozen=True)
class RankLiveness:
    """One rank now: the live PIDs of its tree, its recorded exit status (ssh), and a sentence."""

    rank: RankState
    pids: tuple[int, ...]
    rc: int | None
    detail: str

    @property
    def alive(self) -> bool:
        return bool(self.pids)


def _same(pid: int, created: float | None) -> bool:
    try:
        p = psutil.Process(pid)
        if created is not None and abs(p.create_time() - created) > 0.01:
            return False
        return bool(p.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _local_pids(r: RankState) -> list[int]:
    if r.pid is None:
        return []
    live = set(session_pids(r.pid))
    if _same(r.pid, r.create_time):
        live |= set(tree_pids(r.pid))
    else:
        live.discard(r.pid)  # the number now names another process
    return sorted(live)


def _ssh_pids(r: RankState, ssh: SshLauncher | None) -> tuple[list[int], str]:
    if ssh is None or r.state_dir is None:
        return [], "no ssh connection options in the state"
    res = ssh.shell(r.node, pids_script(r.state_dir), 20.0)
    if res.returncode != 0:
        return [], f"could not ask {r.node}: ssh exit {res.returncode}: {res.stderr.strip()[-200:]}"
    return sorted(int(p) for p in res.stdout.split() if p.isdigit()), ""


def liveness(r: RankState, ssh: SshLauncher | None) -> RankLiveness:
    """Whether ``r``'s tree still runs, asked on its node now."""
    if r.kind.endswith("ssh"):
        pids, problem = _ssh_pids(r, ssh)
        rc = None
        if not pids and not problem and ssh is not None and r.state_dir is not None:
            rc = ssh.remote_state(r.node, r.state_dir).rc
        detail = problem or (f"running (pids {' '.join(map(str, pids))})" if pids else _gone(rc))
        return RankLiveness(r, tuple(pids), rc, detail)
    pids = _local_pids(r)
    return RankLiveness(r, tuple(pids), None, f"running (pids {' '.join(map(str, pids))})" if pids else _gone(None))


def _gone(rc: int | None) -> str:
    return "gone" + (f" (exit status {rc})" if rc is not None else "")


def _signal(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait(r: RankState, until: float) -> list[int]:
    while True:
        left = _local_pids(r)
        if not left or time.perf_counter() >= until:
            return left
        time.sleep(0.05)


def _stop_local(r: RankState, timeout_s: float) -> list[int]:
    """Leader first (a server that stops its own children in order exits cleanly), then the whole session and
    its descendants, then SIGKILL; returns the survivors."""
    deadline = time.perf_counter() + timeout_s
    left = _local_pids(r)
    if r.pid is not None and r.pid in left:
        _signal([r.pid], signal.SIGTERM)
        left = _wait(r, deadline - timeout_s / 2)
    if left:
        _signal(left, signal.SIGTERM)
        _signal(left, signal.SIGCONT)
        left = _wait(r, deadline)
    if left:
        _signal(left, signal.SIGKILL)
        left = _wait(r, time.perf_counter() + 5.0)
    return left


def _stop_ssh(r: RankState, ssh: SshLauncher, timeout_s: float) -> tuple[list[int] | None, str]:
    assert r.state_dir is not None
    res = ssh.shell(r.node, terminate_script(r.state_dir, timeout_s), timeout_s + 30.0)
    if "left:" not in res.stdout:
        return None, f"could not stop it: ssh exit {res.returncode}: {res.stderr.strip()[-200:]}"
    left = [int(p) for p in res.stdout.split("left:")[-1].split() if p.isdigit()]
    if not left:  # the tree is gone: its state directory (pid, log copy, rc) goes too
        ssh.shell(r.node, f"rm -rf '{r.state_dir}'; rmdir \"$(dirname '{r.state_dir}')\" 2>/dev/null; exit 0\n", 15.0)
    return left, ""


def _remove_container(r: RankState, ssh: SshLauncher | None) -> str:
    if not r.container or not r.runtime:
        return ""
    argv = [r.runtime, "rm", "-f", r.container]
    check = [r.runtime, "ps", "-a", "-q", "--filter", f"name=^{r.container}$"]
    if r.kind.endswith("ssh") and ssh is not None:
        ssh.run(r.node, argv, 60.0)
        res = ssh.run(r.node, check, 30.0)
        out, rc = res.stdout, res.returncode
    else:
        import subprocess

        subprocess.run(argv, capture_output=True, timeout=60, check=False)
        p = subprocess.run(check, capture_output=True, text=True, timeout=30, check=False)
        out, rc = p.stdout, p.returncode
    if rc != 0:
        return f"; {r.runtime} ps failed ({rc}): container {r.container} may be left"
    return (
        f"; container {r.container} still listed by {r.runtime}"
        if out.strip()
        else f"; container {r.container} removed"
    )


def stop_rank(r: RankState, ssh: SshLauncher | None, timeout_s: float) -> tuple[bool, str]:
    """Stop ``r``'s whole tree (and its container); ``(nothing left, sentence)``."""
    if r.kind.endswith("ssh"):
        if ssh is None or r.state_dir is None:
            return False, "no ssh connection options in the state: cannot reach the node"
        left, problem = _stop_ssh(r, ssh, timeout_s)
    else:
        left, problem = _stop_local(r, timeout_s), ""
    tail = _remove_container(r, ssh)
    if left is None:
        return False, problem + tail
    if left:
        return False, f"processes {' '.join(map(str, left))} survived SIGKILL; check {r.node} by hand" + tail
    return "still listed" not in tail and "may be left" not in tail, "stopped, nothing of its tree is left" + tail
