"""The real sglang-router (PyPI ``sglang-router``) as a process: it fronts two embedded-engine groups and the
acceptance flow runs through it end to end; a deployment whose group dies is a crash naming the group and node."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("xllamacpp")

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


pytestmark = pytest.mark.slow  # the real sglang-router in front of two embedded groups


def _router_python() -> str:
    cands = [os.environ.get("SSKJ_ROUTER_PYTHON", ""), sys.executable, "/work/venv-router/bin/python"]
    for py in cands:
        if (py and shutil.which(py)) or (py and Path(py).is_file()):
            ok = subprocess.run([py, "-c", "import sglang_router"], capture_output=True, timeout=60)
            if ok.returncode == 0:
                return py
    pytest.skip("sglang-router is not installed (pip install sglang-router; or set SSKJ_ROUTER_PYTHON)")


PROFILE = """
description = "two embedded groups behind the real sglang router"
engine = "embedded"
backends = ["parallel"]
chunks = [256]
concurrencies = [4]
isl = 256
osl = 16
requests = 16
repeats = 1
search = "none"
endpoint = "chat"
slo = "none"

[deployment]
kind = "groups"

[[deployment.groups]]
name = "a"
nodes = "localhost"

[[deployment.groups]]
name = "b"
nodes = "127.0.0.1"

[deployment.router]
port = 0
policy = "round_robin"
"""


@contextlib.contextmanager
def _default_prometheus_port_taken() -> Iterator[None]:
    """Another router on this host holds sglang-router's default Prometheus port (29000): the deployment's router
    must get its own (it panicked at start with 'Address already in use' when two ran side by side)."""
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", 29000))  # (what a router on this host binds)
        s.listen()
    except OSError:
        pass  # already taken (another router): the same condition
    try:
        yield
    finally:
        s.close()


def _routed_run(pytester: pytest.Pytester, router_py: str, prof: Path, reports: Path) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        str(ACCEPTANCE / "test_serving.py"),
        "--profile",
        str(prof),
        "--sskj-router-python",
        router_py,
        "--sskj-python",
        sys.executable,
        "--run-id",
        "routed",
        "--reports-dir",
        str(reports),
        "-p",
        "no:cacheprovider",
        "-rA",
        # the router flow is checked here, not whether the client kept up on a loaded box (the slow phase runs
        # beside the twin phase: 21 % multi-event reads at C=4 made it client-bound once)
        "--sskj-allow-client-bound",
        timeout=300,
    )


def test_acceptance_flow_runs_through_the_real_router_in_front_of_two_groups(pytester: pytest.Pytester) -> None:
    router_py = _router_python()
    prof = pytester.path / "routed.toml"
    prof.write_text(PROFILE)
    reports = pytester.path / "reports"
    with _default_prometheus_port_taken():
        res = _routed_run(pytester, router_py, prof, reports)
    out = res.stdout.str()
    assert res.ret == 0, out[-4000:]
    run = reports / "routed"
    row = json.loads(next((run / "points").glob("*/result.json")).read_text())
    row = row.get("row", row)
    assert row["status"] == "passed" and row["completed"] == 16, row
    assert row["deployment"].startswith("groups: a localhost") and "router local" in row["deployment"], row
    router_logs = list((run / "logs" / "local").glob("router-*.log"))
    assert router_logs, f"expected the router's log under {run / 'logs' / 'local'}"
    text = re.sub(r"\x1b\[[0-9;]*m", "", router_logs[0].read_text(errors="replace"))  # the router colours its log
    served = text.count("uri=/v1/chat/completions")
    assert served >= 2 * 16, f"the router handled the requests (start + finish lines), saw {served} lines"
    assert "Activated" in text, "the router registered its workers"
    teardown = [json.loads(p.read_text()) for p in (run / "logs").glob("pool-teardown*.json")]
    assert all(t["clean"] for t in teardown), teardown


def test_a_dead_group_is_a_crash_naming_the_group_and_node(pytester: pytest.Pytester) -> None:
    from pytest_sskj.errors import ServerCrashed
    from pytest_sskj.server.spec import ServerSpec

    router_py = _router_python()
    prof = pytester.path / "routed.toml"
    prof.write_text(PROFILE)
    config = pytester.parseconfigure(
        "--profile", str(prof), "--sskj-router-python", router_py, "--sskj-python", sys.executable,
        "--reports-dir", str(pytester.path / "reports"),
    )  # fmt: skip
    from pytest_sskj.deploy.plugin import get_deployment_pool

    pool = get_deployment_pool(config)
    try:
        dep = pool.get(ServerSpec(engine="embedded", backend="parallel"))
        assert dep.urls and dep.urls[0].startswith("http://127.0.0.1:"), dep.urls
        dep.check_alive()
        victim = dep.groups["b"].handles[0]
        victim.terminate(10.0)
        with pytest.raises(ServerCrashed, match=r"deployment group b \(serve, nodes 127\.0\.0\.1\)"):
            dep.check_alive()
    finally:
        report = pool.close()
    assert report.clean, f"every process of the deployment is gone after close(), left: {report.leftover}"
    assert report.launched == 3, "two group servers and the router"
