"""``--launcher container`` selected from the command line with the profile's platform layer ``[container]`` table
(image, mounts, GPU flags, env): ``serve start`` runs the rank in ``docker run`` of that image through the stand-in
runtime CLI (:mod:`pytest_sskj.testing.fake_runtime`: no real runtime runs on this machine, see the README), the
state names the container, and ``serve stop`` stops the tree and removes the container.  A container launch without
an image is refused at parse time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_sskj.testing import fake_runtime

REPO = Path(__file__).resolve().parents[2]
IMAGE = "registry.local/sskj-embedded:1"
IMAGE_ID = "sha256:" + "ab" * 32
SECRET = "hf_serveContainerSecret_77"


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A stand-in ``docker`` on PATH (its state dir baked into the wrapper) and a layered profile whose platform
    layer has a ``[container]`` table."""
    state = tmp_path / "runtime"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "docker"
    exe.write_text(
        f"#!/bin/sh\nSSKJ_FAKE_RUNTIME_DIR={state} SSKJ_FAKE_RUNTIME_IMAGE={IMAGE} SSKJ_FAKE_RUNTIME_ID={IMAGE_ID} "
        f'exec {sys.executable} {fake_runtime.__file__} "$@"\n'
    )
    exe.chmod(0o755)
    prof = tmp_path / "profiles"
    (prof / "platforms").mkdir(parents=True)
    (prof / "platforms" / "box.toml").write_text(
        'name = "box"\nchip = "cpu"\n[container]\nruntime = "docker"\n'
        f'image = "{IMAGE}"\nmounts = ["{tmp_path}:/data:ro"]\ngpus = "none"\n[container.env]\nSSKJ_IN_BOX = "1"\n'
    )
    (prof / "job.toml").write_text('description = "embedded in a container"\n[layers]\nplatform = "box"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return state, prof / "job.toml", env


def _serve(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest_sskj", "serve", *args]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, env=env, check=False)


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_serve_start_runs_the_rank_in_the_platforms_container_and_stop_removes_it(
    box: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    state, profile, env = box
    reports = ["--reports-dir", str(tmp_path / "reports")]
    job = ["--profile", str(profile), "--launcher", "container", "--sskj-env", f"HF_TOKEN={SECRET}"]
    started = _serve(env, "start", "boxed", *job, *reports)
    assert started.returncode == 0, f"serve start failed:\n{started.stdout}\n{started.stderr}"
    st = json.loads((tmp_path / "reports" / "deployments" / "boxed.json").read_text())
    (rank,) = st["ranks"]
    assert rank["kind"] == "container+local" and rank["runtime"] == "docker", rank
    assert rank["container"] == "sskj-serve-boxed-local-r0" and (state / rank["container"]).exists()
    assert st["identity"]["nodes"][0]["image"]["digest"] == IMAGE_ID, "the identity names the image it ran"
    runs = [json.loads(x) for x in (state / "runs.jsonl").read_text().splitlines()]
    served = [r for r in runs if "--name" in r]
    assert len(served) == 1, runs
    argv = served[0]
    assert (
        argv[:2] == ["run", "--network"]
        and IMAGE in argv
        and ["-v", f"{tmp_path}:/data:ro"] == argv[argv.index("-v") : argv.index("-v") + 2]
    ), argv
    assert "--gpus" not in argv and ["-e", "SSKJ_IN_BOX"] == argv[argv.index("SSKJ_IN_BOX") - 1 :][:2], argv
    assert SECRET not in json.dumps(runs) + json.dumps(st), "a secret reached a command line or the state"
    status = _serve(env, "status", "boxed", *reports)
    assert status.returncode == 0 and "healthy" in status.stdout, status.stdout + status.stderr
    pid = rank["pid"]
    stopped = _serve(env, "stop", "boxed", *reports)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "container sskj-serve-boxed-local-r0 removed" in stopped.stdout, stopped.stdout
    assert not (state / rank["container"]).exists(), "the runtime still lists the container"
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the container's process {pid} survived stop"
        time.sleep(0.1)


def test_a_container_launch_without_an_image_is_refused_at_parse_time(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "pytest", "acceptance/", "--launcher", "container", "--reports-dir",
            str(tmp_path / "r")]  # fmt: skip
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 4, f"expected a usage error (4), got {run.returncode}:\n{run.stdout}{run.stderr}"
    err = run.stderr
    assert "--launcher container" in err and "needs an image" in err and "--sskj-container-image" in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir()), "nothing may be written"


@pytest.mark.slow
def test_an_acceptance_run_with_launcher_container_serves_from_the_container_and_removes_it(
    box: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> None:
    state, profile, env = box
    argv = [sys.executable, "-m", "pytest", "acceptance/test_serving.py", "--profile", str(profile), "--launcher",
            "container", "--concurrency", "1", "--requests", "4", "--repeats", "1", "--sskj-allow-client-bound",
            "--reports-dir", str(tmp_path / "r"), "--run-id", "c1", "-p", "no:xdist", "-q"]  # fmt: skip
    run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, env=env, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"the containerized run failed ({run.returncode}):\n{out[-3000:]}"
    runs = [json.loads(x) for x in (state / "runs.jsonl").read_text().splitlines()]
    named = [r[r.index("--name") + 1] for r in runs if "--name" in r]
    assert named and all(n.startswith("sskj-c1") for n in named), named
    assert not [n for n in named if (state / n).exists()], "a container is still listed after the run"
    manifest = json.loads((tmp_path / "r" / "c1" / "manifest.json").read_text())
    assert manifest["settings"]["container"]["image"] == IMAGE, manifest["settings"].get("container")
