"""A run id is owned: while one run writes ``<reports>/<run id>/``, a second live run with the same id is
refused at start (exit 4, naming the owner's pid and host) and writes nothing there; a lock left by a
dead process is taken over, saying so; the lock is gone when the run ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAITS = """
import os, time
from pathlib import Path

def test_waits_for_release():
    Path(os.environ["STARTED"]).write_text("x")
    deadline = time.monotonic() + 120
    while not Path(os.environ["RELEASE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""


def _cmd(run_id: str) -> list[str]:
    return [
        sys.executable,
        *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:randomly"),
        *("--reports-dir", "rep", "--run-id", run_id, "--sskj-db", "none", "acceptance"),
    ]


def _project(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "acceptance").mkdir()
    (tmp_path / "acceptance" / "test_waits.py").write_text(WAITS)
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STARTED": str(tmp_path / "started"),
        "RELEASE": str(tmp_path / "release"),
    }


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_second_live_run_with_the_same_run_id_is_refused(tmp_path: Path) -> None:
    env = _project(tmp_path)
    first = subprocess.Popen(_cmd("same"), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), "the first run never started its test"
        lock = json.loads((tmp_path / "rep" / "same" / ".lock").read_text())
        assert lock["pid"] == first.pid and lock["host"] == socket.gethostname()
        manifest_before = (tmp_path / "rep" / "same" / "manifest.json").read_bytes()
        second = subprocess.run(
            _cmd("same"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        err = second.stdout + second.stderr
        assert second.returncode == 4, err[-2000:]
        assert f"being written by a live run (pid {first.pid} on host {socket.gethostname()}" in err, err[-2000:]
        assert (tmp_path / "rep" / "same" / "manifest.json").read_bytes() == manifest_before, "the second run wrote"
    finally:
        (tmp_path / "release").write_text("go")
        out = first.communicate(timeout=120)[0].decode()
    assert first.returncode == 0, out[-2000:]
    assert not (tmp_path / "rep" / "same" / ".lock").exists(), "the lock outlived its run"


def test_the_lock_of_a_dead_run_is_taken_over_saying_so(tmp_path: Path) -> None:
    env = _project(tmp_path)
    (tmp_path / "release").write_text("go")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "rep" / "stale"
    run_dir.mkdir(parents=True)
    (run_dir / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "then"}))
    res = subprocess.run(_cmd("stale"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-2000:]
    assert f"took over the lock of a run that is gone (pid {dead.pid}" in out, out[-2000:]
