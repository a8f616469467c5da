"""Process hygiene: own session, log file, whole-tree teardown (grandchildren and orphans), exit evidence."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import psutil
import pytest

from pytest_sskj.errors import LauncherError
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.process import ManagedProcess, describe_exit, tail_lines
from pytest_sskj.server.spec import NodeCommand

# parent -> child -> grandchild, plus a double-forked orphan whose parent exits (reparented to init)
TREE_SCRIPT = r"""
import os, subprocess, sys, time
pids = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", '''
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1] + ".grandchild", "w").write(str(g.pid))
time.sleep(120)
''', pids])
if os.fork() == 0:
    if os.fork() == 0:
        open(pids + ".orphan", "w").write(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
open(pids + ".child", "w").write(str(child.pid))
print("tree up", flush=True)
time.sleep(120)
"""

STUBBORN_SCRIPT = r"""
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ignoring SIGTERM", flush=True)
time.sleep(120)
"""


def _wait_files(*paths: Path, timeout_s: float = 20.0) -> list[int]:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if all(p.exists() and p.read_text().strip() for p in paths):
            return [int(p.read_text()) for p in paths]
        time.sleep(0.05)
    raise AssertionError(f"the test tree did not come up within {timeout_s} s: {[p.exists() for p in paths]}")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_process_starts_in_its_own_session_and_logs_to_file(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "p.log"
    p = ManagedProcess([sys.executable, "-c", "import os,sys; print('sid', os.getsid(0)); sys.exit(3)"], log)
    assert p.popen.wait(20) == 3
    text = log.read_text()
    assert f"sid {p.pid}" in text, f"the process must lead its own session (sid == pid {p.pid}); log: {text!r}"
    assert p.poll() == 3


def test_terminate_kills_children_grandchildren_and_orphans(tmp_path: Path) -> None:
    stem = tmp_path / "pids"
    p = ManagedProcess([sys.executable, "-c", TREE_SCRIPT, str(stem)], tmp_path / "tree.log")
    child, grandchild, orphan = _wait_files(Path(f"{stem}.child"), Path(f"{stem}.grandchild"), Path(f"{stem}.orphan"))
    assert psutil.Process(orphan).ppid() != p.pid, "the orphan must have been reparented away from the leader"
    seen = set(p.pids())
    assert {p.pid, child, grandchild, orphan} <= seen, f"pids() must list the whole tree, got {sorted(seen)}"
    t0 = time.perf_counter()
    code = p.terminate(timeout_s=5.0)
    took = time.perf_counter() - t0
    assert code == -15, f"expected the leader to die of SIGTERM (-15), got {code}"
    left = [pid for pid in (p.pid, child, grandchild, orphan) if not _gone(pid)]
    assert left == [], f"processes survived terminate(): {left}"
    assert p.pids() == []
    assert took < 5.0, f"a SIGTERM-obeying tree should go quickly, took {took:.2f} s"


def test_terminate_escalates_to_sigkill_for_a_process_ignoring_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "stubborn.log"
    p = ManagedProcess([sys.executable, "-c", STUBBORN_SCRIPT], log)
    deadline = time.perf_counter() + 20
    while "ignoring SIGTERM" not in log.read_text() and time.perf_counter() < deadline:
        time.sleep(0.05)
    t0 = time.perf_counter()
    code = p.terminate(timeout_s=0.5)
    took = time.perf_counter() - t0
    assert code == -9, f"expected SIGKILL (-9) after the grace period, got {code}"
    assert 0.4 < took < 5.0, f"expected ~0.5 s grace then SIGKILL, took {took:.2f} s"
    assert _gone(p.pid)


def test_exit_description_names_code_signal_and_last_log_lines(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    p = ManagedProcess([sys.executable, "-c", "import sys\nfor i in range(50): print('line', i)\nsys.exit(7)"], log)
    assert p.popen.wait(20) == 7
    text = describe_exit("sglang rank 1", 7, log, n=5)
    assert "exited with code 7" in text and "line 49" in text and "line 45" in text and "line 44" not in text, text
    assert "killed by SIGKILL" in describe_exit("x", -9, log)
    assert tail_lines(tmp_path / "missing.log") == []


def test_local_launcher_passes_env_and_tracks_leftovers(tmp_path: Path) -> None:
    launcher = LocalLauncher()
    cmd = NodeCommand(
        "local",
        0,
        (sys.executable, "-c", "import os,time; print(os.environ['SSKJ_T']); time.sleep(60)"),
        (("SSKJ_T", "from-spec"),),
    )
    h = launcher.start(cmd, tmp_path / "local" / "r0.log")
    deadline = time.perf_counter() + 20
    while "from-spec" not in h.log_path.read_text() and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert "from-spec" in h.log_path.read_text()
    assert launcher.leftover_pids() == {"local/rank0": [h.pid]}
    assert h.terminate(5.0) == -15
    assert launcher.leftover_pids() == {}
    res = launcher.run("local", [sys.executable, "-c", "import sys; print('out'); sys.exit(4)"])
    assert (res.returncode, res.stdout.strip()) == (4, "out")


def test_local_launcher_refuses_remote_nodes(tmp_path: Path) -> None:
    with pytest.raises(LauncherError, match="use --launcher ssh"):
        LocalLauncher().start(NodeCommand("601", 0, ("true",)), tmp_path / "x.log")
