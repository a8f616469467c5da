"""End-to-end tests of the ``ssh`` launcher against real sshd hosts 601-604 made of network namespaces.

The module brings the hosts up itself with ``tools/netns_hosts.sh up 4`` (root, ``ip`` and ``sshd`` needed;
otherwise it skips saying which is missing) and takes them down at the end.  Every node is a real OpenSSH
server in its own network namespace; ``ip netns pids`` tells which processes run "on" a node, so teardown
is checked per host.  The SGLang ranks are ``unit/server/data/fake_sglang_rank.py`` (SGLang's real argv,
process tree, health and /server_info behaviour, stdlib only); the replicas test runs the real embedded
llama.cpp engine on every node.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sskj.engines import node_commands
from pytest_sskj.engines.sglang import fetch_server_info, verify_server_info
from pytest_sskj.errors import LauncherError
from pytest_sskj.redact import REDACTED
from pytest_sskj.server.health import wait_healthy
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.server.ssh import SshLauncher, SshOptions, SshProcess, rank_log_path
from pytest_sskj.testing.netns import host_processes, netns_skip_reason, shared_hosts, ssh_connections

REPO = Path(__file__).resolve().parents[2]
NETNS_TOOL = REPO / "tools" / "netns_hosts.sh"
FAKE_RANK = Path(__file__).with_name("data") / "fake_sglang_rank.py"
# one instance of test hosts per SSKJ_NETNS_FIRST (two CI runs at once use different ones); its locks live
# inside its DIR, which the last user's `down` removes
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
HOSTS_DIR = Path(os.environ.get("SSKJ_NETNS_DIR", f"/tmp/sskj-netns-hosts-{FIRST}"))
NODES = tuple(str(FIRST + k) for k in range(4))
N0, N1, N2, N3 = NODES
NET = os.environ.get("SSKJ_NETNS_NET", f"10.213.{(FIRST + 190) % 250}")  # tools/netns_hosts.sh's address plan
BAD = str(FIRST + 98)  # a node name no namespace has
SECRET = "hf_sskjTestSecret_5f1c0a9e7d"
NETNS_PREFIX = "sskjnode"


# CI sets SSKJ_REQUIRE_NETNS=1 so that missing prerequisites fail these tests instead of skipping them
REQUIRED = os.environ.get("SSKJ_REQUIRE_NETNS", "") == "1"
pytestmark = [
    pytest.mark.slow,  # four real sshd hosts in network namespaces
    pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or ""),
]


@dataclass
class Hosts:
    config: Path

    def ns_pids(self, node: str) -> set[int]:
        out = subprocess.run(["ip", "netns", "pids", NETNS_PREFIX + node], capture_output=True, text=True, check=True)
        return {int(p) for p in out.stdout.split()}

    def sshd_pid(self, node: str) -> int:
        return int((self.config.parent / "hosts" / node / "sshd.pid").read_text().strip())

    def foreign_pids(self, node: str) -> set[int]:
        """Every process in the node's namespace but sshd's own (listener, connections): rank trees."""
        return host_processes(NETNS_PREFIX + node, self.sshd_pid(node))

    def connections(self, node: str) -> set[int]:
        """The node's open ssh connections (the launcher's shared master holds one while it is up)."""
        return ssh_connections(NETNS_PREFIX + node, self.sshd_pid(node))

    def wait_empty(self, node: str, timeout_s: float = 5.0) -> set[int]:
        deadline = time.perf_counter() + timeout_s
        while True:
            left = self.foreign_pids(node)
            if not left or time.perf_counter() > deadline:
                return left
            time.sleep(0.1)


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:

    reason = netns_skip_reason()
    if reason is not None:
        pytest.fail(f"SSKJ_REQUIRE_NETNS=1 but the network-namespace hosts cannot be made: {reason}")
    with shared_hosts(
        HOSTS_DIR, len(NODES), NETNS_TOOL
    ) as config:  # the last user (xdist workers share them) takes them down
        yield Hosts(config)


@pytest.fixture(autouse=True)
def one_test_at_a_time(hosts: Hosts) -> Iterator[None]:
    """xdist workers share the hosts; every test checks whole hosts for leftovers, so tests take turns."""
    from filelock import FileLock

    with FileLock(str(HOSTS_DIR / ".use.lock"), timeout=600):
        yield


@pytest.fixture
def launcher(hosts: Hosts) -> Iterator[SshLauncher]:
    ssh = SshLauncher(ssh=SshOptions(config_file=hosts.config))
    yield ssh
    # a failing test must not leave ranks behind for the next one
    ssh.stop_all([h for h in ssh.started if not h.terminated], 5.0)
    ssh.close()


def _sglang_spec(**kw: object) -> ServerSpec:
    base: dict[str, object] = dict(
        engine="sglang",
        backend="flashinfer_mxfp4",
        model_path="/models/Kimi-K3",
        nodes=NODES,
        tp=32,
        ep=4,
        chunk=8192,
        port=30000,
        python=sys.executable,
        env=(("HF_TOKEN", SECRET), ("SSKJ_PLAIN", "visible")),
    )
    base.update(kw)
    return ServerSpec(**base)  # type: ignore[arg-type]


def _fake(cmd: NodeCommand) -> NodeCommand:
    """The same SGLang argv with ``-m sglang.launch_server`` replaced by the fake rank script."""
    argv = list(cmd.argv)
    i = argv.index("sglang.launch_server")
    return NodeCommand(
        cmd.node, cmd.rank, (argv[0], str(FAKE_RANK), *argv[i + 1 :]), cmd.env, cmd.serves_http, cmd.port
    )


def _launch(launcher: SshLauncher, spec: ServerSpec, run_dir: Path) -> tuple[list[SshProcess], list[str], LogOracle]:
    cmds = [_fake(c) for c in node_commands(spec)]
    oracle = LogOracle("sglang", secrets=(SECRET,))
    handles = launcher.start_many([(c, rank_log_path(run_dir, c)) for c in cmds])
    for h in handles:
        oracle.add(h.log_path, h.node, h.rank)
    urls = launcher.urls(cmds)
    wait_healthy("sglang", handles, urls, timeout_s=60.0, oracle=oracle, label="fake sglang")
    return handles, urls, oracle


def _stop_all(launcher: SshLauncher, handles: list[SshProcess]) -> list[int | None]:
    return launcher.stop_all(handles, 10.0)


def test_ranks_run_on_their_own_hosts_with_per_node_logs_and_rank0_health(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    spec = _sglang_spec()
    t0 = time.perf_counter()
    handles, urls, oracle = _launch(launcher, spec, tmp_path)
    print(f"4-node launch to rank-0 health: {time.perf_counter() - t0:.2f} s")
    try:
        assert urls == [f"http://{NET}.101:30000"], f"only rank 0 serves HTTP, at {N0}'s address; got {urls}"
        for h, node in zip(handles, NODES, strict=True):
            assert h.remote_pid in hosts.ns_pids(node), (
                f"rank {h.rank} (pid {h.remote_pid}) should run inside host {node}'s namespace"
            )
            pids = h.pids()
            assert h.remote_pid in pids and len(pids) >= 5, (
                f"rank {h.rank}'s remote tree should hold the rank, 2 schedulers and their children; got {pids}"
            )
            assert h.log_path == tmp_path / "logs" / node / f"rank{h.rank}.log"
        oracle.scan()
        deadline = time.perf_counter() + 10
        while oracle.missing_markers() and time.perf_counter() < deadline:
            time.sleep(0.2)
            oracle.scan()
        assert oracle.missing_markers() == {}, f"healthy-start markers missing: {oracle.missing_markers()}"
        for h, node in zip(handles, NODES, strict=True):
            text = h.log_path.read_text()
            assert f"node_rank={h.rank}" in text and f"[sskj] node={node} rank={h.rank} pid=" in text, text[:800]
        info = fetch_server_info(urls[0])
        assert info is not None, "rank 0 should answer /server_info"
        assert verify_server_info(spec, info) == [], f"fake rank 0 reports what it was launched with: {info}"
        assert oracle.fatal(oracle.findings) == [], [f.describe() for f in oracle.findings]
    finally:
        _stop_all(launcher, handles)
    for node in NODES:
        assert hosts.wait_empty(node) == set(), f"processes left on host {node} after teardown"


def test_secrets_in_env_never_reach_argv_process_listings_or_logs(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    spec = _sglang_spec(nodes=NODES[:2], tp=16)
    handles, _, _ = _launch(launcher, spec, tmp_path)
    try:
        for node in NODES[:2]:
            ps = launcher.run(node, ["ps", "-eo", "pid,args"])
            assert ps.returncode == 0, ps.stderr
            assert SECRET not in ps.stdout, f"the secret is visible in {node}'s process listing"
        env = launcher.run(N0, ["cat", f"/proc/{handles[0].remote_pid}/environ"])
        assert SECRET in env.stdout and "SSKJ_PLAIN=visible" in env.stdout, (
            "the rank itself must receive the environment (HF_TOKEN, SSKJ_PLAIN)"
        )
        time.sleep(0.5)
    finally:
        _stop_all(launcher, handles)
    local = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert SECRET not in local
    for h in handles:
        text = h.log_path.read_text()
        assert SECRET not in text, f"secret leaked into the log copy {h.log_path}"
        assert f"Hugging Face token {REDACTED}" in text, "the rank echoed the token; the copy should redact it"
    for sshd_log in (hosts.config.parent / "hosts").glob("*/sshd.log"):
        assert SECRET not in sshd_log.read_text()


def test_killed_rank_is_detected_within_10s_as_crash_with_log_excerpt(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    spec = _sglang_spec()
    handles, _, oracle = _launch(launcher, spec, tmp_path)
    victim = handles[2]  # node 603
    try:
        tree = victim.pids()
        m = re.search(r"scheduler_0 started \(pid=(\d+)\)", victim.log_path.read_text())
        assert m, victim.log_path.read_text()
        child = int(m.group(1))
        assert child in tree
        mark = oracle.mark()
        t0 = time.perf_counter()
        kill = launcher.run(N2, ["kill", "-9", str(child)])  # what the OOM killer does to a GPU worker
        assert kill.returncode == 0, kill.stderr
        crash = []
        rc = None
        while time.perf_counter() - t0 < 10.0 and not (crash and rc is not None):
            time.sleep(0.1)
            crash = [f for f in oracle.findings_since(mark) if f.category == "crash" and f.node == N2]
            rc = victim.poll()
        detected_s = time.perf_counter() - t0
        print(f"rank kill -> crash finding + exit code: {detected_s:.2f} s")
        assert crash, f"no 'crash' finding on 603 within 10 s; findings {oracle.findings}"
        assert rc == 1, f"603's rank should exit with code 1 after its scheduler died, poll() says {rc}"
        f = crash[0]
        assert f.rank == 2 and f.severity == "fatal" and f"Subprocess scheduler_0 (pid={child})" in f.line
        assert "crashed with exit code -9" in f.excerpt and "Received sigquit" in f.excerpt, f.excerpt
        assert detected_s < 10.0
        others = [h.poll() for h in handles if h is not victim]
        assert others == [None, None, None], f"the other ranks keep running: {others}"
        # the whole rank process (not a child) killed outright: poll() reports the signal
        t1 = time.perf_counter()
        launcher.run(N1, ["kill", "-9", str(handles[1].remote_pid)])
        while handles[1].poll() is None and time.perf_counter() - t1 < 10.0:
            time.sleep(0.1)
        assert handles[1].poll() == -9, f"602 rank killed by SIGKILL should poll -9, got {handles[1].poll()}"
        print(f"rank SIGKILL -> poll() -9: {time.perf_counter() - t1:.2f} s")
    finally:
        _stop_all(launcher, handles)
    for node in NODES:
        assert hosts.wait_empty(node) == set(), f"processes left on host {node} after teardown"


def test_teardown_kills_whole_remote_trees_and_leaves_zero_processes_on_every_host(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    spec = _sglang_spec()
    handles, _, _ = _launch(launcher, spec, tmp_path)
    deadline = time.perf_counter() + 20
    while not all(len(hosts.foreign_pids(n)) >= 5 for n in NODES) and time.perf_counter() < deadline:
        time.sleep(0.2)  # ranks >= 1 may still be spawning their schedulers after rank 0 is healthy
    before = {node: hosts.foreign_pids(node) for node in NODES}
    assert all(len(p) >= 5 for p in before.values()), f"each host runs a rank tree: {before}"
    t0 = time.perf_counter()
    codes = launcher.stop_all(handles, 10.0)
    print(f"teardown of 4 ranks: {time.perf_counter() - t0:.2f} s")
    assert codes == [0, 0, 0, 0], f"ranks exit 0 on SIGTERM, got {codes}"
    assert launcher.leftover_pids() == {}
    for node in NODES:
        left = hosts.wait_empty(node)
        assert left == set(), (
            f"host {node}: processes {sorted(left)} survived teardown (before: {sorted(before[node])})"
        )
    for h in handles:
        assert "exited with status 0" in h.log_path.read_text().splitlines()[-1]


def test_replicas_of_the_embedded_engine_serve_on_every_node(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    pytest.importorskip("xllamacpp", reason="the embedded engine needs the xllamacpp wheel (extra 'embedded')")
    import httpx

    from pytest_sskj.server.embedded import ensure_tiny_model

    model = ensure_tiny_model(tmp_path / "models")
    spec = ServerSpec(
        engine="embedded",
        backend="serial",
        model_path=str(model),
        nodes=NODES,
        placement="replicas",
        port=18080,
        python=sys.executable,
    )
    cmds = node_commands(spec)
    handles = launcher.start_many([(c, rank_log_path(tmp_path, c)) for c in cmds])
    try:
        urls = launcher.urls(cmds)
        assert urls == [f"http://{NET}.10{i}:18080" for i in range(1, 5)], urls
        wait_healthy("embedded", handles, urls, timeout_s=90.0, label="embedded replicas")
        for url in urls:
            r = httpx.post(
                url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 4}, timeout=30, trust_env=False
            )
            assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4, (url, r.text[:300])
    finally:
        _stop_all(launcher, handles)
    for node in NODES:
        assert hosts.wait_empty(node) == set(), f"processes left on host {node} after teardown"


def test_unreachable_node_fails_fast_naming_node_and_fix(hosts: Hosts, tmp_path: Path) -> None:
    # NET.199 is inside the test /24 but no namespace has it: the connection times out
    cfg = tmp_path / "ssh_config"
    cfg.write_text(hosts.config.read_text() + f"Host {BAD}\n    HostName {NET}.199\n    User root\n")
    launcher = SshLauncher(ssh=SshOptions(config_file=cfg, connect_timeout_s=2))
    good = NodeCommand(N0, 0, ("sleep", "600"))
    bad = NodeCommand(BAD, 1, ("sleep", "600"))
    t0 = time.perf_counter()
    with pytest.raises(LauncherError) as exc:
        launcher.start_many([(good, tmp_path / f"{N0}.log"), (bad, tmp_path / f"{BAD}.log")])
    elapsed = time.perf_counter() - t0
    msg = str(exc.value)
    assert elapsed < 10, f"an unreachable node should fail within the 2 s connect timeout (+ teardown), took {elapsed}"
    assert f"node {BAD}" in msg and "--sskj-ssh-config" in msg and "exit status 255" in msg, msg
    assert f"{NET}.199" in msg, f"ssh's own error should be quoted: {msg}"
    assert launcher.started and launcher.started[0].terminated, "the rank that did start must be stopped again"
    launcher.close()
    assert hosts.wait_empty(N0) == set()


def test_server_info_mismatch_is_reported_end_to_end(launcher: SshLauncher, hosts: Hosts, tmp_path: Path) -> None:
    spec = _sglang_spec(nodes=(N0,), tp=8, env=(("FAKE_SGLANG_FORCE_BACKEND", "marlin"),))
    handles, urls, _ = _launch(launcher, spec, tmp_path)
    try:
        info = fetch_server_info(urls[0])
        assert info is not None
        assert verify_server_info(spec, info) == ["moe_runner_backend: spec flashinfer_mxfp4, server reports marlin"]
    finally:
        _stop_all(launcher, handles)


def _wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while not predicate():
        assert time.perf_counter() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.1)


def test_lost_connection_resumes_the_log_stream_without_gaps_and_keeps_the_exit_status(
    launcher: SshLauncher, hosts: Hosts, tmp_path: Path
) -> None:
    code = "import time\nfor i in range(3000):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.02)"
    cmd = NodeCommand(N3, 0, (sys.executable, "-c", code))
    (h,) = launcher.start_many([(cmd, tmp_path / "logs" / N3 / "rank0.log")])
    _wait_for(lambda: h.log_path.is_file() and "tick 20\n" in h.log_path.read_text(), 15, "the first ticks")
    os.killpg(h._proc.pid, signal.SIGKILL)  # the client end of the connection dies; the rank must not
    _wait_for(lambda: h._proc.poll() is not None, 5, "the local ssh to exit")
    assert h.poll() is None, "the rank still runs on 604: poll() must say so"
    assert h.resumes == 1
    assert h.remote_pid in hosts.ns_pids(N3)
    _wait_for(lambda: "tick 150\n" in h.log_path.read_text(), 20, "ticks after the reconnect")
    launcher.run(N3, ["kill", "-TERM", str(h.remote_pid)])
    _wait_for(lambda: h.poll() is not None, 10, "the rank's exit")
    assert h.poll() == -signal.SIGTERM
    lines = h.log_path.read_text().splitlines()
    ticks = [int(x.split()[1]) for x in lines if x.startswith("tick ")]
    assert ticks == list(range(len(ticks))), "the resumed stream continues at the exact byte: no gap, no repeat"
    assert any("stream resumed at byte" in x for x in lines)
    h.terminate(5.0)
    assert hosts.wait_empty(N3) == set()


def test_server_pool_over_ssh_starts_verifies_detects_crash_and_closes_clean(hosts: Hosts, tmp_path: Path) -> None:
    """Part A's ServerPool driving this launcher: health, /server_info check, crash detection, clean close.

    The nodes are named by their addresses here: the pool builds URLs from node names.
    """
    from pytest_sskj.errors import ServerConfigMismatch, ServerCrashed
    from pytest_sskj.server.pool import ServerPool

    ips = tuple(f"{NET}.10{i}" for i in range(1, 5))
    pool = ServerPool(
        log_dir=tmp_path / "logs",
        launcher=SshLauncher(ssh=SshOptions(config_file=hosts.config)),
        health_timeout_s=60.0,
        commands_for=lambda spec: [_fake(c) for c in node_commands(spec)],
    )
    try:
        wrong = _sglang_spec(nodes=ips[:1], tp=8, env=(("FAKE_SGLANG_FORCE_BACKEND", "marlin"),))
        with pytest.raises(ServerConfigMismatch, match=r"moe_runner_backend: spec flashinfer_mxfp4, server reports"):
            pool.get(wrong)
        server = pool.get(_sglang_spec(nodes=ips))
        assert server.urls == [f"http://{NET}.101:30000"]
        server.check_alive()
        assert [h.node for h in server.handles] == list(ips)
        mark = server.mark()
        victim = server.handles[3]
        pattern = re.compile(r"scheduler_0 started \(pid=(\d+)\)")
        _wait_for(lambda: pattern.search(victim.log_path.read_text()) is not None, 20, "604's schedulers")
        child = pattern.search(victim.log_path.read_text())
        assert child
        t0 = time.perf_counter()
        pool.launcher.run(ips[3], ["kill", "-9", child.group(1)])
        crashed: ServerCrashed | None = None
        while crashed is None and time.perf_counter() - t0 < 10.0:
            try:
                server.check_alive()
            except ServerCrashed as exc:
                crashed = exc
            time.sleep(0.1)
        print(f"pool: crash on {ips[3]} detected in {time.perf_counter() - t0:.2f} s")
        assert crashed is not None, "check_alive() did not raise ServerCrashed within 10 s"
        assert "crashed with exit code -9" in str(crashed) or "exited with code 1" in str(crashed), str(crashed)
        crash = [f for f in server.findings_since(mark) if f.category == "crash"]
        assert crash and crash[0].node == ips[3], server.findings_since(mark)
    finally:
        report = pool.close()
    assert report.clean, report.line()
    for node in NODES:
        assert hosts.wait_empty(node) == set(), f"processes left on host {node} after pool.close()"


ARGV_ECHO = """
import hashlib, sys, time
print("argv", sys.argv[1:], "sha", hashlib.sha256(" ".join(sys.argv[1:]).encode()).hexdigest(), flush=True)
time.sleep(60)
"""
ARG_SECRET = "sk-sskjTestArgSecret_9b2e41"


def test_a_secret_server_argument_is_never_on_a_command_line_of_the_node(hosts: Hosts, tmp_path: Path) -> None:
    """``ps`` on the node (world-readable ``/proc/PID/cmdline``) shows no secret argument, the rank still gets
    it in its argv (the hash it prints matches), and the local log copy has it redacted."""
    import hashlib

    (tmp_path / "sskj_argv_echo_node.py").write_text(ARGV_ECHO)
    args = ["--api-key", ARG_SECRET, f"--hf-token={ARG_SECRET}x", "--tp", "8"]
    cmd = NodeCommand(N0, 0, (sys.executable, "-m", "sskj_argv_echo_node", *args), (("PYTHONPATH", str(tmp_path)),))
    ssh = SshLauncher(ssh=SshOptions(config_file=hosts.config))
    try:
        (h,) = ssh.start_many([(cmd, tmp_path / "logs" / N0 / "rank0.log")])
        _wait_for(lambda: h.log_path.is_file() and "sha" in h.log_path.read_text(), 20, "the rank's argv line")
        cmdlines = {
            pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            for pid in hosts.ns_pids(N0)
            if Path(f"/proc/{pid}/cmdline").exists()
        }
        leaked = {pid: c for pid, c in cmdlines.items() if ARG_SECRET in c}
        assert leaked == {}, f"secret argument visible in ps on {N0}: {leaked}"
        log = h.log_path.read_text()
        want = hashlib.sha256(" ".join(args).encode()).hexdigest()
        assert f"sha {want}" in log, f"the rank did not receive its real argv: {log}"
        assert ARG_SECRET not in log and REDACTED in log, log
    finally:
        ssh.stop_all([x for x in ssh.started if not x.terminated], 5.0)
        ssh.close()
    assert hosts.wait_empty(N0) == set()


def _tool(*args: str, first: int, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSKJ_NETNS_")}
    env["SSKJ_NETNS_FIRST"] = str(first)
    return subprocess.run(["bash", str(NETNS_TOOL), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_a_second_instance_of_test_hosts_leaves_this_one_alone(hosts: Hosts, tmp_path: Path) -> None:
    """Another DIR with the same SSKJ_NETNS_FIRST is refused without killing our sshd; another FIRST lives
    beside ours and its ``down`` removes only its own namespaces, veths, bridge and DIR."""
    ours = {node: hosts.sshd_pid(node) for node in NODES}
    clash = _tool("up", "1", str(tmp_path / "clash"), first=FIRST)
    assert clash.returncode != 0 and "belongs to the instance in" in clash.stderr, clash.stderr
    other_first = FIRST + 50
    other = tmp_path / "other"
    try:
        up = _tool("up", "2", str(other), first=other_first)
        assert up.returncode == 0, up.stderr
        probe = subprocess.run(
            ["ssh", "-F", str(other / "ssh_config"), str(other_first), "hostname"], capture_output=True, timeout=30
        )
        assert probe.returncode == 0, probe.stderr
    finally:
        down = _tool("down", str(other), first=other_first)
    assert down.returncode == 0, down.stderr
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    for k in range(2):
        assert f"{NETNS_PREFIX}{other_first + k}" not in names and f"sskjv{other_first + k}" not in links
    assert f"sskjbr{other_first}" not in links and not other.exists()
    assert {node: hosts.sshd_pid(node) for node in NODES} == ours, "our sshds were restarted"
    for node in NODES:
        assert hosts.sshd_pid(node) in hosts.ns_pids(node), f"our sshd on {node} is gone"
