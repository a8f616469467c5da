"""The shipped 8-node PD topology (``profiles/pro6000/kimi3-sglang-pd.toml``) over the SSH launcher on eight
network-namespace test hosts: launch order, every group's rank-0 health, the per-group and cross-group
``/server_info`` checks, the real router, a killed decode rank as a crash naming the group and the node, and
teardown leaving no process on any host.

The module brings up its own instance of eight hosts with ``tools/netns_hosts.sh`` (``SSKJ_NETNS_FIRST`` of
the SSH launcher tests + 4: the eight numbers right after their four, so one run's hosts are FIRST..FIRST+11)
and takes it down at the end.  The profile's node
names 601-608 are mapped onto those hosts by an ssh_config derived from the one the script writes, so the
profile is launched unchanged (only the router's port is 0, a free one, instead of 8000).  The ranks are
``unit/server/data/fake_sglang_rank.py`` (SGLang's real argv, PD flags included); the router is the real
``sglang-router`` where it is installed (``SSKJ_ROUTER_PYTHON`` or ``/work/venv-router/bin/python``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sskj.engines import node_commands
from pytest_sskj.errors import ServerCrashed
from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.server.ssh import SshProcess
from pytest_sskj.testing.netns import host_processes, netns_skip_reason

REPO = Path(__file__).resolve().parents[2]
NETNS_TOOL = REPO / "tools" / "netns_hosts.sh"
FAKE_RANK = REPO / "unit" / "server" / "data" / "fake_sglang_rank.py"
PROFILE = REPO / "profiles" / "pro6000" / "kimi3-sglang-pd.toml"
# our own instance, right after the SSH launcher tests' four hosts (default 601-604 -> 605-612): one run uses
# FIRST..FIRST+11 (and FIRST+50..51 for a moment), so two runs whose SSKJ_NETNS_FIRST differ by 12 or more (and
# not by 50) stay apart, and so do these hosts and theirs
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601")) + 4
HOSTS_DIR = Path(f"/tmp/sskj-netns-pd-hosts-{FIRST}")
HOSTS = tuple(str(FIRST + k) for k in range(8))
PROFILE_NODES = tuple(str(601 + k) for k in range(8))  # the shipped profile's nodes = "601-604" + "605-608"
NET = f"10.213.{(FIRST + 190) % 250}"  # tools/netns_hosts.sh's address plan
NETNS_PREFIX = "sskjnode"


REQUIRED = os.environ.get("SSKJ_REQUIRE_NETNS", "") == "1"
pytestmark = [
    pytest.mark.slow,  # eight real sshd hosts in network namespaces and the real router
    pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or ""),
]


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSKJ_NETNS_")}
    env["SSKJ_NETNS_FIRST"] = str(FIRST)
    return subprocess.run(["bash", str(NETNS_TOOL), *args], capture_output=True, text=True, timeout=120, env=env)


def _ns_pids(host: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", NETNS_PREFIX + host], capture_output=True, text=True, check=True)
    return {int(p) for p in out.stdout.split()}


def _foreign_pids(host: str) -> set[int]:
    """Every process in the host's namespace but sshd's own (its listener and connections)."""
    sshd = int((HOSTS_DIR / "hosts" / host / "sshd.pid").read_text().strip())
    return host_processes(NETNS_PREFIX + host, sshd)


def _wait_empty(timeout_s: float = 10.0) -> dict[str, set[int]]:
    deadline = time.perf_counter() + timeout_s
    while True:
        left = {h: p for h in HOSTS if (p := _foreign_pids(h))}
        if not left or time.perf_counter() > deadline:
            return left
        time.sleep(0.1)


@pytest.fixture(scope="module")
def ssh_config() -> Iterator[Path]:
    """Eight hosts up; an ssh_config naming them 601-608 as the profile does."""
    reason = netns_skip_reason()
    if reason is not None:
        pytest.fail(f"SSKJ_REQUIRE_NETNS=1 but the network-namespace hosts cannot be made: {reason}")
    try:
        up = _tool("up", str(len(HOSTS)), str(HOSTS_DIR))
        assert up.returncode == 0, f"tools/netns_hosts.sh up 8 failed ({up.returncode}):\n{up.stderr}"
        text = (HOSTS_DIR / "ssh_config").read_text()
        for host, alias in zip(HOSTS, PROFILE_NODES, strict=True):
            text, n = re.subn(rf"^Host {host} {NETNS_PREFIX}{host}$", f"Host {alias}", text, flags=re.M)
            assert n == 1, f"expected one 'Host {host} {NETNS_PREFIX}{host}' block in the script's ssh_config"
        cfg = HOSTS_DIR / "pd_ssh_config"
        cfg.write_text(text)
        yield cfg
    finally:
        down = _tool("down", str(HOSTS_DIR))
        assert down.returncode == 0, f"tools/netns_hosts.sh down failed:\n{down.stderr}"


def _router_python() -> str | None:
    for py in (os.environ.get("SSKJ_ROUTER_PYTHON", ""), "/work/venv-router/bin/python", sys.executable):
        if py and Path(py).is_file():
            ok = subprocess.run([py, "-c", "import sglang_router"], capture_output=True, timeout=60)
            if ok.returncode == 0:
                return py
    return None


def _router_workers(url: str, n: int, timeout_s: float = 10.0) -> set[tuple[str, str, bool]]:
    """The router's registered workers (it registers them in the background after /health is 200)."""
    import httpx

    deadline = time.perf_counter() + timeout_s
    while True:
        r = httpx.get(url + "/workers", timeout=5, trust_env=False)
        workers = r.json().get("workers", []) if r.status_code == 200 else []
        seen = {(w.get("url"), w.get("worker_type"), w.get("is_healthy")) for w in workers}
        if (len(seen) >= n and all(h for *_, h in seen)) or time.perf_counter() > deadline:
            return seen
        time.sleep(0.2)


class FakeRanks:
    """The plugin hook that swaps ``-m sglang.launch_server`` for the stand-in rank, keeping SGLang's argv."""

    @pytest.hookimpl
    def pytest_sskj_server_commands(self, config: pytest.Config, spec: ServerSpec) -> list[NodeCommand]:
        out = []
        for c in node_commands(spec):
            argv = list(c.argv)
            i = argv.index("sglang.launch_server")
            out.append(
                NodeCommand(
                    c.node, c.rank, (sys.executable, str(FAKE_RANK), *argv[i + 1 :]), c.env, c.serves_http, c.port
                )
            )
        return out


def test_shipped_pd_topology_launches_healthy_over_ssh_a_killed_decode_rank_is_a_crash_and_teardown_is_clean(
    ssh_config: Path, pytester: pytest.Pytester
) -> None:
    from pytest_sskj.deploy.plugin import get_deployment_pool
    from pytest_sskj.stash import SETTINGS_KEY

    router_py = _router_python()
    pytester.plugins.append(FakeRanks())
    args = ["--profile", str(PROFILE), "--launcher", "ssh", "--sskj-ssh-config", str(ssh_config)]
    args += ["--sskj-python", sys.executable, "--reports-dir", str(pytester.path / "reports")]
    # the stand-in ranks need no GPU: a pinned CUDA_VISIBLE_DEVICES skips the nodes' nvidia-smi pre-flight
    args += ["--sskj-env", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"]
    if router_py is not None:
        args += ["--sskj-router-python", router_py]
    config = pytester.parseconfigure(*args)
    settings = config.stash[SETTINGS_KEY]
    topo = settings.deployment
    assert topo is not None and topo.kind == "pd", f"the shipped PD profile declares a pd deployment, got {topo}"
    assert topo.nodes == PROFILE_NODES, f"expected the profile's nodes {PROFILE_NODES}, got {topo.nodes}"
    assert topo.router is not None
    # port 0: a free one on this machine (the profile's 8000 may be taken); no router where none is installed
    router = None if router_py is None else dataclasses.replace(topo.router, port=0)
    config.stash[SETTINGS_KEY] = dataclasses.replace(settings, deployment=dataclasses.replace(topo, router=router))

    pool = get_deployment_pool(config)
    try:
        t0 = time.perf_counter()
        dep = pool.get(ServerSpec(engine="sglang", backend="flashinfer_mxfp4"))
        healthy_s = time.perf_counter() - t0
        print(f"8-node PD launch (prefill, decode, router) to healthy: {healthy_s:.2f} s")
        assert list(dep.groups) == ["prefill", "decode"], f"launch order prefill, decode; got {list(dep.groups)}"
        for name, first in (("prefill", 0), ("decode", 4)):
            server = dep.groups[name]
            nodes = [h.node for h in server.handles]
            assert nodes == list(PROFILE_NODES[first : first + 4]), (
                f"group {name}: expected ranks on its nodes, got {nodes}"
            )
            assert server.urls == [f"http://{NET}.{101 + first}:30000"], (
                f"group {name}: rank 0 serves at its host's address, got {server.urls}"
            )
            info = server.server_info()
            assert info is not None, f"group {name}: rank 0 should answer /server_info"
            seen = (info["disaggregation_mode"], info["disaggregation_transfer_backend"], info["page_size"])
            assert seen == (name, "mooncake", 64), (
                f"group {name}: expected ({name}, mooncake, 64), /server_info says {seen}"
            )
            for h, host in zip(server.handles, HOSTS[first : first + 4], strict=True):
                assert isinstance(h, SshProcess), f"expected ranks started by the ssh launcher, got {h!r}"
                assert h.remote_pid in _ns_pids(host), f"{h.node} rank {h.rank} should run in host {host}'s namespace"
        assert dep.config_problems() == [], f"per-group and PD checks should pass, got {dep.config_problems()}"
        if router_py is None:
            print("router assertions skipped: sglang-router is not installed (set SSKJ_ROUTER_PYTHON)")
        else:
            assert dep.router is not None and dep.router.poll() is None, "the real sglang-router process is up"
            assert dep.urls and dep.urls[0].startswith("http://127.0.0.1:"), (
                f"the client talks to the router: {dep.urls}"
            )
            argv = dep.commands[-1].argv
            assert "--pd-disaggregation" in argv, f"the router runs in PD mode: {argv}"
            assert f"http://{NET}.101:30000" in argv and f"http://{NET}.105:30000" in argv, argv
            want = {(f"http://{NET}.101:30000", "prefill", True), (f"http://{NET}.105:30000", "decode", True)}
            seen_workers = _router_workers(dep.urls[0], len(want))
            assert seen_workers == want, f"the router's /workers: expected {want}, seen {seen_workers}"
        dep.check_alive()

        victim = dep.groups["decode"].handles[2]  # node 607, host FIRST+6
        assert isinstance(victim, SshProcess) and victim.node == "607", f"expected 607's ssh rank, got {victim!r}"
        t1 = time.perf_counter()
        kill = pool.pools["decode"].launcher.run(victim.node, ["kill", "-9", str(victim.remote_pid)])
        assert kill.returncode == 0, kill.stderr
        crashed: ServerCrashed | None = None
        while crashed is None and time.perf_counter() - t1 < 10.0:
            try:
                dep.check_alive()
            except ServerCrashed as exc:
                crashed = exc
            time.sleep(0.1)
        detect_s = time.perf_counter() - t1
        print(f"decode rank SIGKILL on 607 -> crash verdict: {detect_s:.2f} s")
        assert crashed is not None, "check_alive() did not raise ServerCrashed within 10 s of killing 607's rank"
        msg = str(crashed)
        assert msg.startswith("deployment group decode (decode, nodes 605,606,607,608)"), (
            f"expected the crash to name group decode first, got: {msg[:300]}"
        )
        assert "607 rank 2 was killed by SIGKILL" in msg, (
            f"expected the crash to name node 607 rank 2, got: {msg[:400]}"
        )
        assert dep.groups["prefill"].alive(), "the prefill group keeps running"
    finally:
        t2 = time.perf_counter()
        report = pool.close()
        print(f"teardown (router, decode, prefill): {time.perf_counter() - t2:.2f} s")
    assert report.clean, f"close() reports every PID gone, left: {report.leftover}"
    expected = 8 + (1 if router_py else 0)
    assert report.launched == expected, f"expected {expected} processes launched (8 ranks + router), {report.launched}"
    left = _wait_empty()
    assert left == {}, f"no process but sshd should be left in any of the eight namespaces, seen {left}"
