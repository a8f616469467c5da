"""Teardown order: the top process gets SIGTERM alone first, so a server that stops its own children in
order (vLLM's API server before EngineCore: a group SIGTERM makes it log EngineDeadError) exits cleanly."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

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


def test_a_prompt_exit_is_seen_without_waiting_for_a_polling_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop is waited for between two measured phases: a server that exits a few ms after its SIGTERM must
    be seen gone then, not at the next fixed 20 ms tick (the old loops slept 0.02 s at least once per stop).
    Asserted on what the code can know: the seconds our own teardown loops chose to sleep, not a wall time."""
    import pytest_sskj.server.process as proc

    up = tmp_path / "up"
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        f"open({str(up)!r}, 'w').write('up')\n"
        "time.sleep(120)\n"
    )
    p = ManagedProcess([sys.executable, "-c", script], tmp_path / "p.log")
    deadline = time.perf_counter() + 30
    while not up.exists() and time.perf_counter() < deadline:
        time.sleep(0.05)
    slept: list[float] = []

    class _Time:
        perf_counter = staticmethod(time.perf_counter)
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(s: float) -> None:
            slept.append(s)
            time.sleep(s)

    monkeypatch.setattr(proc, "time", _Time)
    assert p.terminate(timeout_s=10.0) == 0, "the process exits by itself on SIGTERM"
    assert p.pids() == []
    assert sum(slept) < 0.02, f"expected the exit seen within the first short look (< 20 ms of sleeps), saw {slept}"
