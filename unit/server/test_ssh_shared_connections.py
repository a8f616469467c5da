"""The ssh launcher's shared connections (``pytest_sskj/server/ssh_mux.py``) against real sshd hosts in network
namespaces: the same instance of hosts as ``test_ssh_launcher.py`` (``tools/netns_hosts.sh``, reference-counted,
one test at a time on its lock).  What a node's sshd logs is the witness: one ``Accepted publickey`` line per
TCP connection it accepted."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_sskj.server.ssh import SshLauncher, SshOptions
from pytest_sskj.server.ssh_mux import refused, stale, user_manages
from pytest_sskj.testing.netns import netns_skip_reason, shared_hosts, ssh_connections

REPO = Path(__file__).resolve().parents[2]
NETNS_TOOL = REPO / "tools" / "netns_hosts.sh"
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
HOSTS_DIR = Path(os.environ.get("SSKJ_NETNS_DIR", f"/tmp/sskj-netns-hosts-{FIRST}"))
N0 = str(FIRST)
REQUIRED = os.environ.get("SSKJ_REQUIRE_NETNS", "") == "1"
_netns = pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or "")


def test_a_users_own_connection_sharing_options_turn_ours_off() -> None:
    assert user_manages(["ControlMaster=no"]) and user_manages(["controlpath = /x/%C"])
    assert not user_manages(["StrictHostKeyChecking=accept-new", "ServerAliveInterval=3"])
    assert SshLauncher(ssh=SshOptions(options=("ControlMaster=no",)))._shared is None
    assert SshLauncher(ssh=SshOptions())._shared is not None


def test_ssh_messages_of_a_stale_socket_and_a_refused_channel_are_told_apart() -> None:
    msg = "Control socket connect(/tmp/sskj-ssh-x/ab12): Connection refused"
    assert stale(msg) and not refused(0, msg)
    busy = "mux_client_request_session: session request failed: Session open refused by peer"
    assert refused(255, busy) and not refused(1, busy) and not stale(busy)


@pytest.fixture(scope="module")
def config() -> Iterator[Path]:
    reason = netns_skip_reason()
    if reason is not None:
        pytest.fail(f"SSKJ_REQUIRE_NETNS=1 but the network-namespace hosts cannot be made: {reason}")
    with shared_hosts(HOSTS_DIR, 4, NETNS_TOOL) as cfg:
        yield cfg


@pytest.fixture
def turn(config: Path) -> Iterator[Path]:
    from filelock import FileLock

    with FileLock(str(HOSTS_DIR / ".use.lock"), timeout=600):
        yield config


def _accepted(node: str) -> int:
    """TCP connections the node's sshd accepted so far."""
    return (HOSTS_DIR / "hosts" / node / "sshd.log").read_text(errors="replace").count("Accepted publickey")


def _connections(node: str) -> set[int]:
    listener = int((HOSTS_DIR / "hosts" / node / "sshd.pid").read_text().strip())
    return ssh_connections(f"sskjnode{node}", listener)


def _wait(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.slow
@_netns
def test_queries_of_a_node_ride_one_connection_and_close_ends_it(turn: Path) -> None:
    launcher = SshLauncher(ssh=SshOptions(config_file=turn))
    before = _accepted(N0)
    try:
        assert launcher.run(N0, ["true"]).returncode == 0  # direct; the master is made meanwhile
        assert _wait(lambda: len(_connections(N0)) == 1), f"one master connection on {N0}: {_connections(N0)}"
        after_first = _accepted(N0)
        for _ in range(6):
            res = launcher.shell(N0, "echo ok\n")
            assert (res.returncode, res.stdout.strip()) == (0, "ok"), res
        assert _accepted(N0) == after_first, (
            f"6 queries after the master was up opened {_accepted(N0) - after_first} new connection(s), expected 0"
        )
        assert after_first - before == 2, f"the first query and the master: 2 connections, saw {after_first - before}"
    finally:
        launcher.close()
    assert _wait(lambda: not _connections(N0)), f"close() left connection(s) on {N0}: {_connections(N0)}"
    assert launcher._shared is not None and launcher._shared._dir is None, "the socket directory is removed"


@pytest.mark.slow
@_netns
def test_a_killed_master_costs_one_direct_query_then_a_new_master_is_made(turn: Path) -> None:
    launcher = SshLauncher(ssh=SshOptions(config_file=turn))
    try:
        launcher.run(N0, ["true"])
        assert _wait(lambda: len(_connections(N0)) == 1)
        master = _master_pid(launcher)
        os.kill(master, signal.SIGKILL)  # its socket file stays behind
        assert _wait(lambda: not _connections(N0)), "the master's connection is gone with it"
        res = launcher.shell(N0, "echo still\n")
        assert (res.returncode, res.stdout.strip()) == (0, "still"), f"a stale socket must not fail a query: {res}"
        launcher.run(N0, ["true"])  # makes the new master
        assert _wait(lambda: len(_connections(N0)) == 1), "a new master is made after the stale socket was seen"
        n = _accepted(N0)
        assert launcher.shell(N0, "echo again\n").stdout.strip() == "again"
        assert _accepted(N0) == n, "queries ride the new master"
    finally:
        launcher.close()
    assert _wait(lambda: not _connections(N0))


def _master_pid(launcher: SshLauncher) -> int:
    shared = launcher._shared
    assert shared is not None and shared._dir is not None
    socket = shared._sockets[N0]
    out = subprocess.run(
        ["ssh", "-F", str(HOSTS_DIR / "ssh_config"), "-o", f"ControlPath={socket}", "-O", "check", N0],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert out.returncode == 0, f"the master answers -O check: {out.stderr}"
    return int(out.stderr.split("pid=")[1].split(")")[0])


@pytest.mark.slow
@_netns
def test_with_the_users_control_master_no_every_query_connects_on_its_own(turn: Path) -> None:
    launcher = SshLauncher(ssh=SshOptions(config_file=turn, options=("ControlMaster=no",)))
    try:
        before = _accepted(N0)
        for _ in range(3):
            assert launcher.run(N0, ["true"]).returncode == 0
        assert _accepted(N0) - before == 3, "no sharing: one connection per query"
    finally:
        launcher.close()
