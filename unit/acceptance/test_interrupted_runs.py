"""Interrupted and unlaunchable runs, end to end on the embedded engine.

SIGTERM and SIGINT sent to the pytest process alone, while a point runs, both end the run in order:
``manifest.json`` says ``status: interrupted`` with the signal and exit status 2, the finished point's
row and ``summary.md`` are kept, the interrupted point has its row (category ``interrupted``), and the
server is torn down.  A launcher failure (ssh cannot reach the node) is one ``launch`` failure per
server spec with the launcher's reason; the spec's later points are ``not run: launch failed``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHAPE = (
    *("--isl", "128", "--osl", "4", "--chunk", "512", "--concurrency", "8"),
    *("--sskj-search", "none", "-p", "no:cacheprovider"),
)


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", str(ROOT / "acceptance"), "--reports-dir", "rep", *SHAPE, *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the signal goes to pytest alone, as in the issue
        # a user's Ctrl-C reaches an interactive pytest; a background job of a script (CI's phases) starts with
        # SIGINT ignored, which pytest (and the plugin, on purpose) would keep: the run would finish, unasked
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler),
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_run_leaves_an_interrupted_manifest_and_the_finished_points(
    tmp_path: Path, sig: signal.Signals
) -> None:
    proc = _start(
        tmp_path, "-k", "test_serving", "--backend", "parallel", "--requests", "400", "--repeats", "2", "--run-id", "i"
    )
    run = tmp_path / "rep" / "i"
    second = run / "points" / "parallel-chunk512-c8-r2" / "requests.jsonl"
    try:
        deadline = time.perf_counter() + 240
        while not (second.is_file() and second.stat().st_size > 0) and time.perf_counter() < deadline:
            assert proc.poll() is None, "the run ended before it could be interrupted"
            time.sleep(0.1)
        assert second.is_file(), "the second point never started"
        t0 = time.perf_counter()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        # issue 27 asks for <= 5 s: measured and reported, not asserted (a loaded box is not a benchmark)
        print(f"{sig.name}: the run ended {time.perf_counter() - t0:.2f} s after the signal")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["status"], manifest["signal"], manifest["exitstatus"]) == ("interrupted", sig.name, 2), (
        manifest["status"],
        manifest.get("signal"),
        manifest.get("exitstatus"),
        out[-3000:],
    )
    rows = {r["point_id"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert rows["parallel-chunk512-c8-r1"]["status"] == "passed", rows.keys()
    stopped = rows["parallel-chunk512-c8-r2"]
    assert stopped["category"] == "interrupted" and stopped["reasons"][0].startswith("interrupted:"), stopped
    assert "[timeout]" not in stopped["reasons"][0]
    summary = (run / "summary.md").read_text()
    assert "interrupted" in summary and "parallel" in summary, summary[:2000]
    assert "every PID on every node is gone" in out, out[-3000:]
    assert proc.returncode == 2, proc.returncode
    servers = [
        int(m) for f in (run / "logs").rglob("*.log") for m in re.findall(r"listening on .* pid (\d+)\)", f.read_text())
    ]
    assert servers, "the embedded server logs its pid"
    left = [pid for pid in servers if _alive(pid)]
    assert not left, f"server process(es) {left} outlived the interrupted run"
    assert not _session_members(proc.pid), f"processes of the run's session left: {_session_members(proc.pid)}"
    requests = second.read_text().splitlines()
    assert requests, "the interrupted point's requests are on disk"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")


def _session_members(sid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":  # field 6 (session) after the state and ppid, pgrp
            out.append(int(stat.parent.name))
    return out


@pytest.mark.skipif(
    shutil.which("ssh") is None,
    reason="needs the OpenSSH client (ssh) on PATH: without it an ssh launch is a usage error at parse time "
    "(unit/foundation/test_bad_input.py)",
)
def test_a_launcher_failure_is_one_launch_failure_per_spec_and_the_rest_not_run(tmp_path: Path) -> None:
    proc = _start(
        tmp_path,
        "--nodes",
        "sskj-no-such-host.invalid",
        "--launcher",
        "ssh",
        "--backend",
        "parallel,serial",
        "--requests",
        "4",
        "--repeats",
        "3",
        "--run-id",
        "l",
        "-rs",
    )
    out, _ = proc.communicate(timeout=240)
    run = tmp_path / "rep" / "l"
    rows = {r["point_id"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    for backend in ("parallel", "serial"):
        first = rows[f"{backend}-chunk512-c8-r1"]
        assert first["category"] == "launch", first
        assert "could not be launched" in first["reasons"][0] and "sskj-no-such-host.invalid" in first["reasons"][0]
        for r in (2, 3):
            later = rows[f"{backend}-chunk512-c8-r{r}"]
            assert later["status"] == "not_run", later
            assert later["reasons"] == [f"not run: launch failed at {backend}-chunk512-c8-r1"], later
    assert out.count("Traceback") == 0, out[-3000:]
