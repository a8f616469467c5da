"""The container launcher on a real runtime: Debian's ``docker.io`` (dockerd + containerd + runc), started by this
test as root on a private socket, with an image built here from this machine's own files (``docker import`` of a
rootfs tarball: no registry pull).  A rank (``python3 -m http.server``, the stdlib mounted read-only) runs in its
named container on the host network and answers HTTP, the identity probe names the image id the runtime reports,
and teardown stops the client tree and removes the container.  Skips (with the reason) where there is no
``dockerd`` or no root; ``SSKJ_REQUIRE_DOCKER=1`` turns the skip into a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_sskj.server.container import ContainerConfig, ContainerLauncher
from pytest_sskj.server.health import probe
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.pool import free_port
from pytest_sskj.server.process import ManagedProcess
from pytest_sskj.server.spec import NodeCommand

REQUIRED = os.environ.get("SSKJ_REQUIRE_DOCKER", "") == "1"
pytestmark = pytest.mark.slow  # a real container daemon
_BINARIES = ("/bin/sh", "/usr/bin/sleep", "/usr/bin/env", "/usr/bin/python3")


def _skip(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"SSKJ_REQUIRE_DOCKER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def _rootfs(root: Path) -> None:
    """The binaries and the shared libraries they load, copied from this machine."""
    for b in _BINARIES:
        libs = subprocess.run(["ldd", b], capture_output=True, text=True, check=False).stdout.split()
        for f in [b, *(x for x in libs if x.startswith("/"))]:
            dst = root / f.lstrip("/")
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(f).resolve(), dst)


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0 or shutil.which("dockerd") is None or shutil.which("docker") is None:
        _skip("needs root, dockerd and the docker CLI (apt-get install docker.io)")
    d = tmp_path_factory.mktemp("dockerd")
    sock = f"unix://{d}/sock"
    argv = ["dockerd", "--data-root", str(d / "root"), "--exec-root", str(d / "exec"), "--pidfile", str(d / "pid"),
            "-H", sock, "--iptables=false", "--bridge=none"]  # fmt: skip
    daemon = ManagedProcess(argv, d / "dockerd.log")
    os.environ["DOCKER_HOST"] = sock
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                _skip(f"dockerd did not start: {(d / 'dockerd.log').read_text()[-1500:]}")
            time.sleep(0.5)
        _rootfs(d / "rootfs")
        tar = subprocess.Popen(["tar", "-C", str(d / "rootfs"), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "-", "sskj-mini:1"], stdin=tar.stdout, capture_output=True,
                             text=True, check=False, timeout=120)  # fmt: skip
        tar.wait()
        assert imp.returncode == 0, f"docker import failed: {imp.stderr}"
        yield "sskj-mini:1", imp.stdout.strip()
    finally:
        subprocess.run(["docker", "rm", "-f", "sskj-real-local-r0"], capture_output=True, check=False)
        os.environ.pop("DOCKER_HOST", None)
        daemon.terminate(20.0)
        for ns in (d / "exec" / "netns").glob("*"):  # dockerd's host-network namespace mount outlives it
            subprocess.run(["umount", str(ns)], capture_output=True, check=False)


def test_a_rank_serves_http_from_a_real_container_and_teardown_removes_it(docker: tuple[str, str]) -> None:
    image, image_id = docker
    py = "/usr/lib/python3.11"
    config = ContainerConfig(image=image, runtime="docker", mounts=(f"{py}:{py}:ro",), gpus="none",
                             env=(("SSKJ_IN_CONTAINER", "1"),))  # fmt: skip
    launcher = ContainerLauncher(LocalLauncher(), config, tag="real")
    assert launcher.digest("local") == image_id, "the identity names the image id the runtime reports"
    port = free_port()
    cmd = NodeCommand("local", 0, ("python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"), ())
    handle = launcher.start(cmd, Path(os.environ.get("TMPDIR", "/tmp")) / f"sskj-real-docker-{port}.log")
    try:
        deadline = time.monotonic() + 60
        while probe(f"http://127.0.0.1:{port}", "/", 2.0)[0] != 200:
            assert handle.poll() is None, f"the container exited ({handle.poll()}): {handle.log_path.read_text()}"
            assert time.monotonic() < deadline, f"no HTTP answer from the container: {handle.log_path.read_text()}"
            time.sleep(0.5)
        ps = subprocess.run(["docker", "ps", "-q", "--filter", "name=^sskj-real-local-r0$"], capture_output=True,
                            text=True, check=False)  # fmt: skip
        assert ps.stdout.strip(), "the runtime does not list the running container"
        inspect = subprocess.run(["docker", "inspect", "--format", "{{.Config.Env}}", "sskj-real-local-r0"],
                                 capture_output=True, text=True, check=False).stdout  # fmt: skip
        assert "SSKJ_IN_CONTAINER=1" in inspect, inspect
    finally:
        handle.terminate(15.0)
    assert handle.removed is True, "teardown did not remove the container"
    left = subprocess.run(["docker", "ps", "-a", "-q", "--filter", "name=^sskj-real-local-r0$"], capture_output=True,
                          text=True, check=False).stdout  # fmt: skip
    assert not left.strip(), f"the container is still listed: {left}"
    assert handle.pids() == [], "the runtime client's tree survived teardown"


def test_serve_start_runs_the_embedded_engine_in_a_real_container_and_stop_removes_it(
    docker: tuple[str, str], tmp_path: Path
) -> None:
    """The whole flow on the real runtime: the platform layer's ``[container]`` (this machine's Python, checkout and
    libraries mounted read-only into the imported image), ``serve start --launcher container``, health through the
    container, ``serve stop``: the tree stopped and the container removed."""
    import json
    import sys

    image, image_id = docker
    repo = Path(__file__).resolve().parents[2]
    # this machine's Python (the base install and the venv this test runs in, wherever they lie) and the checkout
    # (wherever it was cloned: CI's clone is not where a developer's is) are mounted at their own paths
    trees = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), repo}
    mounts = ["/usr:/usr:ro", "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:ro",
              *(f"{t}:{t}:ro" for t in sorted(trees) if not any(t != o and t.is_relative_to(o) for o in trees)),
              f"{tmp_path}:{tmp_path}"]  # fmt: skip
    if not Path("/usr/lib/x86_64-linux-gnu").is_dir():
        _skip("this layout test mounts /usr/lib/x86_64-linux-gnu (Debian x86-64)")
    prof = tmp_path / "profiles"
    (prof / "platforms").mkdir(parents=True)
    (prof / "platforms" / "dk.toml").write_text(
        f'name = "dk"\nchip = "cpu"\n[container]\nruntime = "docker"\nimage = "{image}"\n'
        f'mounts = {json.dumps(mounts)}\ngpus = "none"\n'
    )
    (prof / "job.toml").write_text('description = "embedded in real docker"\n[layers]\nplatform = "dk"\n')
    serve = [sys.executable, "-m", "pytest_sskj", "serve"]
    reports = ["--reports-dir", str(tmp_path / "reports")]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*serve, *args, *reports], cwd=repo, capture_output=True, text=True, timeout=240,
                              check=False)  # fmt: skip

    started = run("start", "realdk", "--profile", str(prof / "job.toml"), "--launcher", "container")
    assert started.returncode == 0, f"serve start failed:\n{started.stdout}\n{started.stderr}"
    state = json.loads((tmp_path / "reports" / "deployments" / "realdk.json").read_text())
    try:
        assert state["identity"]["nodes"][0]["image"]["digest"] == image_id, state["identity"]["nodes"][0]
        ps = subprocess.run(["docker", "ps", "-q", "--filter", "name=^sskj-serve-realdk-local-r0$"],
                            capture_output=True, text=True, check=False)  # fmt: skip
        assert ps.stdout.strip(), "the runtime does not list the deployment's container"
        st = run("status", "realdk")
        assert st.returncode == 0 and "healthy" in st.stdout, st.stdout + st.stderr
    finally:
        stopped = run("stop", "realdk")
    assert stopped.returncode == 0 and "container sskj-serve-realdk-local-r0 removed" in stopped.stdout, (
        stopped.stdout + stopped.stderr
    )
    left = subprocess.run(["docker", "ps", "-a", "-q"], capture_output=True, text=True, check=False).stdout
    assert not left.strip(), f"containers left: {left}"
