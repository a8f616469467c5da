"""A second Ctrl-C ends the run at once (issue 27): the first one unwinds in order (the teardown below
would take ten minutes), the second one exits with status 130 right away and the manifest says
``interrupted``, not ``running``.  Nothing is timed: a second Ctrl-C that did not work waits out the
teardown's sleep and the ``communicate`` timeout fails the test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SLOW_TEARDOWN = """
import os, signal, time
import pytest

@pytest.fixture
def slow_teardown():
    yield
    os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C again while the teardown runs
    time.sleep(600)

def test_interrupted(slow_teardown):
    os.kill(os.getpid(), signal.SIGINT)  # the first Ctrl-C
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_second_ctrl_c_ends_the_run_at_once_with_an_interrupted_manifest(tmp_path: Path) -> None:
    (tmp_path / "test_twice.py").write_text(SLOW_TEARDOWN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "test_twice.py", "--reports-dir", "rep", "--run-id", "twice"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),  # not ignored in a bg job
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (proc.returncode, out[-2000:])
    assert "second SIGINT: exiting now" in out, out[-2000:]
    manifest = json.loads((tmp_path / "rep" / "twice" / "manifest.json").read_text())
    assert (manifest["status"], manifest.get("signal")) == ("interrupted", "SIGINT"), manifest
