"""``pytest unit/`` interrupted by SIGINT to the outer pytest alone (not its process group) stops within
10 s and leaves no inner pytest of a ``pytester.runpytest_subprocess`` behind (the repository conftest's
``pytester`` kills its children with the test)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

OUTER = """
def test_runs_an_inner_pytest(pytester):
    pytester.makepyfile(test_inner="import time\\ndef test_sleeps():\\n    time.sleep(120)\\n")
    pytester.runpytest_subprocess("-p", "no:sskj", "-p", "no:cacheprovider", timeout=300)
"""


def _inner_pids(marker: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(proc.name))
            except OSError:
                continue
    return out


@pytest.mark.slow
def test_sigint_to_the_outer_pytest_stops_it_within_10_s_and_kills_the_inner_one(tmp_path: Path) -> None:
    (tmp_path / "test_outer.py").write_text(OUTER)
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())  # the repository's pytester glue
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.exit(pytest.main(sys.argv[1:]))",
            "-p",
            "conftest",
            "-p",
            "no:sskj",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:hypothesispytest",
            f"--basetemp={tmp_path / 'bt'}",
            str(tmp_path / "test_outer.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    marker = str(tmp_path / "bt")
    try:
        deadline = time.perf_counter() + 120
        while not [p for p in _inner_pids(marker) if p != outer.pid] and time.perf_counter() < deadline:
            time.sleep(0.2)
        inner = [p for p in _inner_pids(marker) if p != outer.pid]
        assert inner, "the inner pytest never started"
        time.sleep(1.0)
        outer.send_signal(signal.SIGINT)
        t0 = time.perf_counter()
        out, _ = outer.communicate(timeout=60)
        took = time.perf_counter() - t0
    finally:
        if outer.poll() is None:
            os.killpg(outer.pid, signal.SIGKILL)
            outer.wait()
    assert took < 10.0, f"the outer pytest took {took:.1f} s to stop after SIGINT:\n{out[-2000:]}"
    assert "KeyboardInterrupt" in out, out[-2000:]
    time.sleep(0.5)
    left = [p for p in inner if Path(f"/proc/{p}").exists() and "zombie" not in Path(f"/proc/{p}/status").read_text()]
    assert left == [], f"inner pytest still running: {left}"
