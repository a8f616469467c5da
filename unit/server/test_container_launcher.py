"""The container launch mode: the exact ``docker run`` / ``podman run`` lines, env by name only, logs scanned
the same way, teardown that removes the container, identity naming the image.  No container runtime can run
on this box (podman 4.3.1 from Debian installs and imports a locally built image, but ``podman run`` fails:
``crun: setrlimit RLIMIT_NOFILE/RLIMIT_NPROC: Operation not permitted``), so the runtime is the stand-in
CLI :mod:`pytest_sskj.testing.fake_runtime`, run through the real local launcher."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from pytest_sskj.identity import probe_nodes
from pytest_sskj.server.container import ContainerConfig, ContainerLauncher
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.spec import NodeCommand, ServerSpec
from pytest_sskj.testing import fake_runtime

SECRET = "hf_containerSecret_91b2"
IMAGE = "registry.local/sglang-kimi3:v0.5.23-fi6.18"
IMAGE_ID = "sha256:5d1e4c0f0b9e3a1d2c7b6a5f4e3d2c1b0a99887766554433221100ffeeddccbb"


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "podman"):
        exe = bin_dir / name
        exe.write_text(f'#!/bin/sh\nexec {sys.executable} {fake_runtime.__file__} "$@"\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    state = tmp_path / "state"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_DIR", str(state))
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_IMAGE", IMAGE)
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_ID", IMAGE_ID)
    return state


def _config(runtime: str = "docker") -> ContainerConfig:
    return ContainerConfig.from_platform(
        {"runtime": runtime, "image": IMAGE, "mounts": ["/models:/models:ro"], "env": {"NCCL_DEBUG": "WARN"}}
    )


def test_command_lines_for_docker_and_podman_carry_image_mounts_gpus_and_env_names_only() -> None:
    cmd = NodeCommand("601", 1, ("python3", "-m", "sglang.launch_server", "--tp", "32"), (("HF_TOKEN", SECRET),))
    docker = ContainerLauncher(LocalLauncher(), _config("docker"), tag="r1").describe(cmd)
    assert docker == (
        "docker run --network host --ipc host --name sskj-r1-601-r1 --gpus all -v /models:/models:ro "
        f"-e NCCL_DEBUG -e HF_TOKEN {IMAGE} python3 -m sglang.launch_server --tp 32"
    )
    podman = ContainerLauncher(LocalLauncher(), _config("podman"), tag="r1").describe(cmd)
    assert "podman run --network host --ipc host --name sskj-r1-601-r1 --device nvidia.com/gpu=all -v" in podman
    assert SECRET not in docker + podman and "WARN" not in docker
    with pytest.raises(ValueError, match="runtime 'lxc' is not one of docker, podman"):
        ContainerConfig(image=IMAGE, runtime="lxc")
    with pytest.raises(ValueError, match=r"unknown key.*imag; known"):
        ContainerConfig.from_platform({"imag": IMAGE})


def test_a_rank_runs_in_its_container_logs_are_scanned_and_teardown_removes_it(runtime: Path, tmp_path: Path) -> None:
    inner = LocalLauncher()
    launcher = ContainerLauncher(inner, _config(), tag="t1")
    prog = (
        "import os, sys, time; print('token length', len(os.environ['HF_TOKEN']), 'nccl', os.environ['NCCL_DEBUG']);"
        "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', flush=True); time.sleep(60)"
    )
    cmd = NodeCommand("local", 0, (sys.executable, "-c", prog), (("HF_TOKEN", SECRET),))
    log = tmp_path / "logs" / "local" / "rank0.log"
    handle = launcher.start(cmd, log)
    oracle = LogOracle("sglang", secrets=(SECRET,))
    oracle.add(handle.log_path, "local", 0)
    deadline = time.perf_counter() + 30
    while "out of memory" not in (log.read_text() if log.exists() else "") and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert handle.poll() is None and handle.pids(), "the container's process runs"
    assert (runtime / "sskj-t1-local-r0").exists(), "the runtime knows the named container"
    oracle.scan()
    assert [f.category for f in oracle.findings_since(None)][:1] == ["oom"], oracle.findings_since(None)
    text = log.read_text()
    assert f"token length {len(SECRET)} nccl WARN" in text, "env values reach the container by name"
    (run_argv,) = [json.loads(x) for x in (runtime / "runs.jsonl").read_text().splitlines()]
    assert SECRET not in " ".join(run_argv) and ["-e", "HF_TOKEN"] == run_argv[run_argv.index("HF_TOKEN") - 1 :][:2]
    handle.terminate(5.0)
    assert handle.removed is True
    assert not (runtime / "sskj-t1-local-r0").exists(), "teardown removed the container"
    assert inner.leftover_pids() == {}
    launcher.close()


def test_identity_probe_runs_inside_the_image_and_names_its_digest(runtime: Path) -> None:
    launcher = ContainerLauncher(LocalLauncher(), _config(), tag="t2")
    (ident,) = probe_nodes(launcher, ServerSpec(engine="embedded", backend="serial"))
    assert ident.error is None, ident.error
    assert ident.image == {"name": IMAGE, "digest": IMAGE_ID, "runtime": "docker"}
    missing = ContainerLauncher(LocalLauncher(), ContainerConfig(image="nope:1"), tag="t3")
    (bad,) = probe_nodes(missing, ServerSpec(engine="embedded", backend="serial"))
    assert bad.error is not None and "image 'nope:1' not found on local (docker)" in bad.error


def test_a_second_server_started_while_the_first_runs_gets_its_own_container(runtime: Path, tmp_path: Path) -> None:
    """The pool starts the next point's server before it stops the current one: the same rank of the next
    server must not take (and so remove) the running container's name."""
    launcher = ContainerLauncher(LocalLauncher(), _config(), tag="t2")
    cmd = NodeCommand("local", 0, (sys.executable, "-c", "import time; time.sleep(60)"))
    first = launcher.start(cmd, tmp_path / "a.log")
    second = launcher.start(cmd, tmp_path / "b.log")
    try:
        assert first.name == "sskj-t2-local-r0" and second.name != first.name, (first.name, second.name)
        assert first.poll() is None and (runtime / first.name).exists(), "the running server's container is kept"
        first.terminate(5.0)
        third = launcher.start(cmd, tmp_path / "c.log")
        assert third.name == first.name, "a removed container's name is free again"
        third.terminate(5.0)
    finally:
        second.terminate(5.0)
        launcher.close()
