"""``serve start|status|stop`` over the real ssh launcher on network-namespace sshd hosts, with the stand-in SGLang
cluster (platform twin: SGLang's own ``/server_info`` from the real sglang parser when ``SSKJ_SGLANG_PYTHON`` names
it): four ranks started by ``serve start`` keep running on their nodes after it returned, ``status`` finds them
there, a ``--sskj-deployment`` run verifies its labels against the server (a contradicting backend or chunk is
refused naming the served value), and ``stop`` leaves nothing on any node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sskj.testing.netns import netns_skip_reason, shared_hosts

REPO = Path(__file__).resolve().parents[2]
NETNS_TOOL = REPO / "tools" / "netns_hosts.sh"
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
HOSTS_DIR = Path(os.environ.get("SSKJ_NETNS_DIR", f"/tmp/sskj-netns-hosts-{FIRST}"))
NODES = tuple(str(FIRST + k) for k in range(4))
REQUIRED = os.environ.get("SSKJ_REQUIRE_NETNS", "") == "1"
pytestmark = [
    pytest.mark.slow,  # four real sshd hosts in network namespaces, a four-rank stand-in cluster
    pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or ""),
]


@pytest.fixture(scope="module")
def ssh_config() -> Iterator[Path]:
    """The SSH launcher tests' hosts (same instance, same reference counting and locks)."""
    from filelock import FileLock

    with shared_hosts(HOSTS_DIR, 4, NETNS_TOOL) as config, FileLock(str(HOSTS_DIR / ".use.lock"), timeout=600):
        yield config


def _run(argv: list[str], timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    sglang = Path("/work/main/.venv-sglang/bin/python")
    if "SSKJ_SGLANG_PYTHON" not in env and sglang.is_file():
        env["SSKJ_SGLANG_PYTHON"] = str(sglang)
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)


def _remote_alive(ssh_config: Path, node: str, pid: int) -> bool:
    res = subprocess.run(["ssh", "-F", str(ssh_config), node, f"kill -0 {pid}"], capture_output=True, timeout=30)
    return res.returncode == 0


def test_a_deployment_started_over_ssh_outlives_start_verifies_its_labels_and_stops_on_every_node(
    ssh_config: Path, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    job = ["--profile", "twin/kimi3-sglang-prefill", "--nodes", f"{NODES[0]}-{NODES[-1]}"]
    common = ["--sskj-ssh-config", str(ssh_config), "--reports-dir", str(reports)]
    serve = [sys.executable, "-m", "pytest_sskj", "serve"]
    started = _run([*serve, "start", "kimi", *job, "--backend", "flashinfer_mxfp4", "--chunk", "8K", *common])
    assert started.returncode == 0, f"serve start failed:\n{started.stdout}\n{started.stderr}"
    state = json.loads((reports / "deployments" / "kimi.json").read_text())
    try:
        assert [(r["node"], r["kind"]) for r in state["ranks"]] == [(n, "ssh") for n in NODES], state["ranks"]
        assert state["ssh"]["config_file"] == str(ssh_config) and state["spec"]["tp"] == 32
        assert len(state["identity"]["nodes"]) == 4, "every node's identity is recorded"
        for r in state["ranks"]:
            assert _remote_alive(ssh_config, r["node"], r["pid"]), f"rank {r['rank']} is not running on {r['node']}"
        st = _run([*serve, "status", "kimi", *common])
        assert st.returncode == 0 and "deployment kimi: healthy" in st.stdout, st.stdout + st.stderr
        bench = [sys.executable, "-m", "pytest", "acceptance/", "--sskj-deployment", "kimi", "--profile",
                 "twin/kimi3-sglang-prefill", "-k", "no_test_has_this_name", "-p", "no:xdist", *common[2:]]  # fmt: skip
        wrong = _run([*bench, "--backend", "marlin", "--chunk", "8K"])
        assert wrong.returncode == 4, f"a contradicting backend label must be refused:\n{wrong.stdout}{wrong.stderr}"
        assert "backend: the run's label is marlin, but the server at" in wrong.stderr
        assert "serves flashinfer_mxfp4 (/server_info)" in wrong.stderr, wrong.stderr
        chunk = _run([*bench, "--backend", "flashinfer_mxfp4", "--chunk", "16K"])
        assert chunk.returncode == 4 and "chunk: the run's label is 16384" in chunk.stderr, chunk.stderr
        assert "serves 8192" in chunk.stderr, chunk.stderr
        right = _run([*bench, "--backend", "flashinfer_mxfp4", "--chunk", "8K"])
        assert right.returncode == 5, (
            f"labels that match must pass (no test selected: 5):\n{right.stdout}{right.stderr}"
        )
        assert "verified backend, chunk, tp, ep, dp, model_path" in right.stdout, right.stdout
        assert "labels not verified" not in right.stdout, right.stdout
    finally:
        stopped = _run([*serve, "stop", "kimi", *common])
    assert stopped.returncode == 0, f"serve stop failed:\n{stopped.stdout}\n{stopped.stderr}"
    assert stopped.stdout.count("nothing of its tree is left") == 4, stopped.stdout
    left = [r["node"] for r in state["ranks"] if _remote_alive(ssh_config, r["node"], r["pid"])]
    assert left == [], f"ranks still running after stop on {left}"
    assert not (reports / "deployments" / "kimi.json").exists()
