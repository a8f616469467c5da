"""The network-namespace sshd test hosts (``tools/netns_hosts.sh``) for every test module that builds them: their
prerequisites (``None`` when they can be made here, else the exact reason and the fix) and one shared instance per
hosts directory, reference-counted across modules and xdist workers."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["host_processes", "netns_skip_reason", "shared_hosts", "ssh_connections"]


def netns_skip_reason() -> str | None:
    if sys.platform != "linux":
        return f"network-namespace hosts need Linux, this is {sys.platform}"
    if os.geteuid() != 0:
        return "network-namespace sshd hosts need root (ip netns add, sshd); run the suite as root or in CI"
    for tool, fix in (("ip", "iproute2"), ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"'{tool}' not found: apt-get install -y {fix}"
    if not os.access("/usr/sbin/sshd", os.X_OK):
        return "/usr/sbin/sshd not found: apt-get install -y openssh-server"
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _namespace_pids(namespace: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True, check=True)
    return {int(p) for p in out.stdout.split()}


def _split(namespace: str, listener: int) -> tuple[set[int], set[int]]:
    """The host's processes but its sshd listener, as (sshd connection processes, everything else): one read."""
    pids = _namespace_pids(namespace) - {listener}
    sshd = {p for p in pids if _cmdline(p).startswith("sshd:")}
    return sshd, pids - sshd


def ssh_connections(namespace: str, listener: int) -> set[int]:
    """The host's sshd connection processes (``sshd: root@notty``, one per open ssh connection: the launcher's
    shared master holds one while it is up), not its listener."""
    return _split(namespace, listener)[0]


def host_processes(namespace: str, listener: int) -> set[int]:
    """Every process "on" a host (``ip netns pids``) but sshd's own (its listener and its connection
    processes): what a rank tree or a stray of one leaves there."""
    return _split(namespace, listener)[1]


@contextlib.contextmanager
def shared_hosts(hosts_dir: Path, count: int, tool: Path) -> Iterator[Path]:
    """Bring up ``count`` hosts in ``hosts_dir`` (``tool up``: a no-op when they are up) and yield their
    ``ssh_config``; every user (a test module of any process) is counted under ``hosts_dir/users`` and the last
    one to leave takes the hosts down.  Tests that check whole hosts for leftovers also take turns on
    ``hosts_dir/.use.lock`` (the caller's choice: per test or per module)."""
    from filelock import FileLock

    hosts_dir.mkdir(parents=True, exist_ok=True)
    users = hosts_dir / "users"
    with FileLock(str(hosts_dir / ".up.lock")):
        up = subprocess.run(
            ["bash", str(tool), "up", str(count), str(hosts_dir)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert up.returncode == 0, f"tools/netns_hosts.sh up failed ({up.returncode}):\n{up.stderr}"
        users.mkdir(exist_ok=True)
        (users / str(os.getpid())).touch()
    try:
        yield hosts_dir / "ssh_config"
    finally:
        with FileLock(str(hosts_dir / ".up.lock")):
            (users / str(os.getpid())).unlink(missing_ok=True)
            alive = [p for p in users.iterdir() if p.name.isdigit() and Path(f"/proc/{p.name}").exists()]
            if not alive:
                subprocess.run(
                    ["bash", str(tool), "down", str(hosts_dir)], check=False, capture_output=True, timeout=120
                )
