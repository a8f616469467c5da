"""Identity over the real ssh launcher on network-namespace sshd hosts (the nodes of the SSH launcher tests):
each host runs its own install (a ``python`` that picks a build by the host's address), the probe runs on
every node over ssh, and a node with another FlashInfer commit refuses the launch before any rank starts."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from identity_builds import make_build, python_switch

from pytest_sskj.errors import EnvironmentMismatch
from pytest_sskj.identity import differences, identity_prelaunch, probe_nodes
from pytest_sskj.server.pool import ServerPool
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.server.ssh import SshLauncher, SshOptions
from pytest_sskj.testing.netns import netns_skip_reason, shared_hosts

REPO = Path(__file__).resolve().parents[2]
NETNS_TOOL = REPO / "tools" / "netns_hosts.sh"
FIRST = int(os.environ.get("SSKJ_NETNS_FIRST", "601"))
HOSTS_DIR = Path(os.environ.get("SSKJ_NETNS_DIR", f"/tmp/sskj-netns-hosts-{FIRST}"))
NODES = tuple(str(FIRST + k) for k in range(4))
NET = os.environ.get("SSKJ_NETNS_NET", f"10.213.{(FIRST + 190) % 250}")
REQUIRED = os.environ.get("SSKJ_REQUIRE_NETNS", "") == "1"
pytestmark = [
    pytest.mark.slow,  # four real sshd hosts in network namespaces
    pytest.mark.skipif(not REQUIRED and netns_skip_reason() is not None, reason=netns_skip_reason() or ""),
]


@pytest.fixture(scope="module")
def ssh_config() -> Iterator[Path]:
    """The SSH launcher tests' hosts (same instance, same reference counting and locks)."""
    from filelock import FileLock

    with shared_hosts(HOSTS_DIR, 4, NETNS_TOOL) as config, FileLock(str(HOSTS_DIR / ".use.lock"), timeout=600):
        yield config


def _addr(k: int) -> str:
    return f"{NET}.{100 + k + 1}"


def test_every_node_is_probed_over_ssh_and_a_different_build_on_one_refuses_the_launch(
    ssh_config: Path, tmp_path: Path
) -> None:
    a = make_build(tmp_path / "a")
    b = make_build(tmp_path / "b", flashinfer_commit="69ff11fc4954")
    mixed = python_switch(tmp_path / "mixed-python", {_addr(2): b.python}, a.python)
    same = python_switch(tmp_path / "same-python", {}, a.python)
    launcher = SshLauncher(ssh=SshOptions(config_file=ssh_config))
    try:
        ids = probe_nodes(launcher, ServerSpec(engine="sglang", backend="marlin", nodes=NODES, python=str(same)))
        assert [i.error for i in ids] == [None] * 4, [i.error for i in ids]
        assert differences(ids) == []
        assert {i.packages["flashinfer"]["commit"] for i in ids} == {"b525c513fef7"}
        spec = ServerSpec(engine="sglang", backend="marlin", nodes=NODES, tp=32, chunk=4096, python=str(mixed))
        pool = ServerPool(log_dir=tmp_path / "logs", launcher=launcher, prelaunch=identity_prelaunch(None))
        with pytest.raises(EnvironmentMismatch) as exc:
            pool.get(spec)
        msg = str(exc.value)
        n0, n1, n2, n3 = NODES
        assert f"flashinfer.commit: {n0}, {n1}, {n3} = b525c513fef7; {n2} = 69ff11fc4954" in msg, msg
        assert launcher.started == [], "nothing may start on a mixed build"
        pool.close()
    finally:
        launcher.close()
