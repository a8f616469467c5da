"""Hangs on the embedded default, end to end (``pytest acceptance/`` in a subprocess, no ``--timeout``: the
plugin's point budget, not the ini's ``timeout = 600``, bounds the test): a SIGSTOPped real server at the default
stall timeout (30 s) gets a ``hang`` verdict within 60 s; a server that accepts and never answers, and one that drips
a byte a second, each get one within ``--sskj-stall-timeout`` plus start-up (5 s here: the same detector, without
waiting out the default twice more -- issue 50); later points of that server are not run, and the server is torn
down."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.testing.stalling import Handler, drips, never_answers, serve

pytestmark = pytest.mark.slow  # hangs waiting out the default 30 s stall timeout, end to end

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
BOUND_S = 60.0
STALL_S = 5.0
"""The stall timeout the never-answers / drips targets run with (the SIGSTOP test keeps the default, 30 s)."""

FREEZE = """
import json, os, signal, threading, time
from pathlib import Path
from pytest_sskj.stash import EXTRA_KEY, SETTINGS_KEY

TARGET = "parallel-chunk512-c8-r1"

def _freeze(config):
    path = config.stash[SETTINGS_KEY].run_dir / "points" / TARGET / "requests.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = len(path.read_text().splitlines()) if path.is_file() else 0
        pool = config.stash[EXTRA_KEY].get("server_pool")
        if n >= 2 and pool is not None:
            pids = [pid for s in list(pool.running.values()) for h in s.handles for pid in h.pids()]
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            Path(os.environ["FREEZE_STAMP"]).write_text(json.dumps({"t": time.time(), "pids": pids}))
            return
        time.sleep(0.005)

def pytest_runtest_setup(item):
    if item.name == "test_serving[" + TARGET + "]":
        threading.Thread(target=_freeze, args=(item.config,), daemon=True).start()
"""


def _run(pytester: pytest.Pytester, run_id: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        str(ACCEPTANCE),
        "-k",
        "test_serving",
        "--reports-dir",
        str(pytester.path / "reports"),
        "--run-id",
        run_id,
        "-p",
        "no:cacheprovider",
        "--isl",
        "128",
        "--osl",
        "4",
        "--requests",
        "16",
        "--repeats",
        "2",
        "--chunk",
        "512",
        "--concurrency",
        "8",
        "--backend",
        "parallel",
        "--sskj-search",
        "none",
        *args,
        timeout=400,
    )


def _row(pytester: pytest.Pytester, run_id: str, point: str) -> dict[str, Any]:
    return dict(json.loads((pytester.path / "reports" / run_id / "points" / point / "result.json").read_text()))


def test_a_sigstopped_server_is_a_hang_within_60_s_and_is_torn_down(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(sskj_freeze=FREEZE)
    stamp = pytester.path / "frozen.json"
    monkeypatch.setenv("FREEZE_STAMP", str(stamp))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(pytester.path), os.environ.get("PYTHONPATH")])))
    res = _run(pytester, "stop", "-p", "sskj_freeze")
    out = res.stdout.str()
    assert stamp.is_file(), "the server was never frozen: " + out[-3000:]
    frozen = json.loads(stamp.read_text())
    row = _row(pytester, "stop", "parallel-chunk512-c8-r1")
    assert row["category"] == "hang", row
    assert re.match(
        r"\[timeout\] server parallel-chunk512 hung during parallel-chunk512-c8-r1: .*stalled", row["reasons"][0]
    )
    mtime = (pytester.path / "reports" / "stop" / "points" / "parallel-chunk512-c8-r1" / "result.json").stat().st_mtime
    print(f"SIGSTOP: hang verdict written {mtime - frozen['t']:.1f} s after the freeze")
    assert mtime - frozen["t"] < BOUND_S, f"verdict {mtime - frozen['t']:.1f} s after the freeze"
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: not run: server hung at parallel-chunk512-c8-r1"])
    assert "Timeout" not in out or "pytest-timeout" not in out, "the stall verdict must come before pytest-timeout"
    for pid in frozen["pids"]:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), pid


@pytest.mark.parametrize("handler", [never_answers, drips], ids=["accepts-never-answers", "drips-1-byte-per-s"])
def test_a_target_that_never_answers_or_drips_is_a_hang_within_the_stall_timeout(
    pytester: pytest.Pytester, handler: Handler
) -> None:
    with serve(handler) as url:
        t0 = time.time()
        res = _run(pytester, "tgt", "--target-url", url, "--sskj-model", "m", "--sskj-stall-timeout", f"{STALL_S:g}")
        took = time.time() - t0
    print(f"{handler.__name__}: whole run {took:.1f} s")
    row = _row(pytester, "tgt", "parallel-chunk512-c8-r1")
    assert row["category"] == "hang", row
    assert "stalled" in row["reasons"][0], row["reasons"]
    assert took < STALL_S + 40.0, f"the whole run took {took:.1f} s"  # one stall timeout plus start-up (~19 s here)
    res.stdout.fnmatch_lines(["SKIPPED [[]1[]] *: not run: server hung at parallel-chunk512-c8-r1"])
