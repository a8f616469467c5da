"""Teardown order: the top process gets SIGTERM alone first, so a server that stops its own children in
order (vLLM's API server before EngineCore: a group SIGTERM makes it log EngineDeadError) exits cleanly."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pytest_sskj.server.process import ManagedProcess

# the leader logs its SIGTERM, takes 0.5 s to shut down, logs its exit; the child logs when SIGTERM reaches it
LEADER = r"""
import signal, subprocess, sys, time
out = sys.argv[1]
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
def term(*_):
    open(sys.argv[1], "a").write("child-term\\n"); sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(sys.argv[1], "a").write("child-up\\n")
time.sleep(120)
''', out])
def term(*_):
    open(out, "a").write("leader-term\n"); time.sleep(0.5); open(out, "a").write("leader-exit\n"); sys.exit(0)
signal.signal(signal.SIGTERM, term)
time.sleep(120)
"""


def test_the_top_process_is_stopped_before_the_group_gets_sigterm(tmp_path: Path) -> None:
    events = tmp_path / "events"
    p = ManagedProcess([sys.executable, "-c", LEADER, str(events)], tmp_path / "p.log")
    deadline = time.perf_counter() + 30
    while "child-up" not in (events.read_text() if events.exists() else "") and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert p.terminate(timeout_s=10.0) == 0, "the leader exits by itself on SIGTERM"
    seen = events.read_text().split()
    assert seen[:1] == ["child-up"] and "child-term" in seen, seen
    assert seen.index("leader-exit") < seen.index("child-term"), (
        f"expected the leader to finish its shutdown before the group SIGTERM reached the child, saw {seen}"
    )
    assert p.pids() == []
