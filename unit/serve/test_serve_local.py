"""``python -m pytest_sskj serve start|status|stop`` on this machine (the embedded engine, the local launcher): the
deployment outlives the command that started it, is found again by name, refuses a second start, and is torn down
whole; a dead or missing deployment is said to be so.  Each command runs as the user types it (a subprocess from
the repository root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


def serve(*args: str, reports: Path, timeout_s: float = 240.0) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "pytest_sskj", "serve", *args, "--reports-dir", str(reports)]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _gone_within(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_started_deployment_outlives_its_command_is_refused_twice_and_stops_whole(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    secret = "s3cr3t-token-value"
    started = serve("start", "demo", "--sskj-env", f"HF_TOKEN={secret}", reports=reports)
    assert started.returncode == 0, f"serve start failed ({started.returncode}):\n{started.stdout}\n{started.stderr}"
    path = reports / "deployments" / "demo.json"
    text = path.read_text()
    assert secret not in text, "the state file holds a secret environment value"
    state = json.loads(text)
    assert state["name"] == "demo" and state["engine"] == "embedded" and state["urls"], state
    assert state["started_at"] and state["identity"].get("build"), "start time and build identity are recorded"
    assert state["spec"]["backend"] and state["spec"]["env"].get("HF_TOKEN") != secret
    ranks = state["ranks"]
    assert [(r["node"], r["rank"], r["kind"]) for r in ranks] == [("local", 0, "local")], ranks
    pid = ranks[0]["pid"]
    assert _alive(pid), f"the server (pid {pid}) did not outlive `serve start`"
    tree = [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    try:
        st = serve("status", "demo", reports=reports)
        assert st.returncode == 0, f"expected a healthy deployment:\n{st.stdout}\n{st.stderr}"
        assert "healthy" in st.stdout and f"pids {pid}" in st.stdout, st.stdout
        again = serve("start", "demo", reports=reports)
        assert again.returncode == 1, f"a second start of a live name must be refused:\n{again.stdout}{again.stderr}"
        assert "already running" in again.stderr and "serve stop demo" in again.stderr, again.stderr
        assert json.loads(path.read_text())["ranks"][0]["pid"] == pid, "the refused start replaced the state"
    finally:
        stopped = serve("stop", "demo", reports=reports)
    assert stopped.returncode == 0, f"serve stop failed:\n{stopped.stdout}\n{stopped.stderr}"
    assert _gone_within(tree) == [], f"processes of the tree survived stop: {[p for p in tree if _alive(p)]}"
    assert not path.exists(), "stop must remove the state file"
    missing = serve("stop", "demo", reports=reports)
    assert missing.returncode == 1 and "no deployment named 'demo'" in missing.stderr, missing.stderr


@pytest.mark.slow
def test_a_dead_deployment_is_reported_dead_and_stop_says_it_was_not_running(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    assert serve("start", "--name", "gone", reports=reports).returncode == 0
    pid = json.loads((reports / "deployments" / "gone.json").read_text())["ranks"][0]["pid"]
    os.killpg(pid, signal.SIGKILL)
    assert _gone_within([pid]) == []
    st = serve("status", reports=reports)
    assert st.returncode == 1 and "deployment gone: DEAD" in st.stdout and "rank 0 (local): gone" in st.stdout, (
        st.stdout
    )
    stopped = serve("stop", "gone", reports=reports)
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert "was not running" in stopped.stderr and "state file was removed" in stopped.stderr, stopped.stderr
    assert not (reports / "deployments" / "gone.json").exists()
    restarted = serve("start", "gone", reports=reports)  # a dead name can be started again
    try:
        assert restarted.returncode == 0, restarted.stderr
        assert "state of a dead deployment" not in restarted.stdout  # the state was removed by stop
    finally:
        serve("stop", "gone", reports=reports)


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_bad_options_are_the_runs_own_usage_errors_and_nothing_starts(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    bad = serve("start", "x", "--concurrency", "0", reports=reports)
    assert bad.returncode == 4, f"expected exit 4 (usage), got {bad.returncode}:\n{bad.stderr}"
    assert "--concurrency" in bad.stderr, bad.stderr
    name = serve("start", "../evil", reports=reports)
    assert name.returncode == 4 and "is not accepted" in name.stderr, (
        f"expected exit 4 (usage) naming the refused name, got {name.returncode}:\n{name.stderr}"
    )
    assert not (reports / "deployments").exists() or not list((reports / "deployments").glob("*.json"))
    target = serve("start", "y", "--target-url", "http://127.0.0.1:9", reports=reports)
    assert target.returncode == 1 and "launches one" in target.stderr, target.stderr


@pytest.mark.slow
def test_acceptance_benchmarks_a_named_deployment_and_every_verdict_says_which_labels_were_not_verified(
    tmp_path: Path,
) -> None:
    reports = tmp_path / "reports"
    assert serve("start", "bench", reports=reports).returncode == 0
    try:
        argv = [sys.executable, "-m", "pytest", "acceptance/", "--sskj-deployment", "bench", "--backend", "parallel",
                "--reports-dir", str(reports), "--run-id", "r1", "-p", "no:xdist", "-q"]  # fmt: skip
        run = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
        out = run.stdout + run.stderr
        assert "labels not verified: backend (the embedded llama.cpp server does not report it)" in out, out[-3000:]
        state = json.loads((reports / "deployments" / "bench.json").read_text())
        manifest = json.loads((reports / "r1" / "manifest.json").read_text())
        assert manifest["target"]["url"] == state["urls"][0], manifest.get("target")
        assert manifest["target"]["not_verified"] == {"backend": "the embedded llama.cpp server does not report it"}
        verdicts = json.loads((reports / "r1" / "verdicts.json").read_text())["verdicts"]
        assert verdicts, f"no verdicts were written:\n{out[-3000:]}"
        for v in verdicts:
            assert "labels not verified: backend" in v["message"], v["message"]
        summary = (reports / "r1" / "summary.md").read_text()
        assert "- labels not verified: backend (the embedded llama.cpp server does not report it)" in summary
        missing = subprocess.run([*argv[:5], "nope", *argv[6:]], cwd=REPO, capture_output=True, text=True,
                                 timeout=120, check=False)  # fmt: skip
        assert missing.returncode == 4 and "no deployment named 'nope'" in missing.stderr + missing.stdout
    finally:
        serve("stop", "bench", reports=reports)


def _pumps_of(log: str) -> list[int]:
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "pytest_sskj.server.logpump" in cmd and log in cmd:
            out.append(p.pid)
    return out


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_local_rank_with_a_secret_argument_keeps_logging_redacted_after_serve_start_returns(tmp_path: Path) -> None:
    """A secret server argument makes the rank log through a redacting pump; the deployment outlives ``serve
    start``, so the pump does too (its own process, the secret handed over in a file it deletes): requests
    served after the command returned still reach the log, redacted, and the rank stays up until ``serve stop``,
    which also ends the pump."""
    import httpx

    reports = tmp_path / "reports"
    secret = "hf_PLANTEDserve0301"
    env = {**os.environ, "SSKJ_SERVER_ARGS": f"--hf-token={secret}"}
    argv = [sys.executable, "-m", "pytest_sskj", "serve", "start", "sec", "--reports-dir", str(reports)]
    started = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert started.returncode == 0, f"serve start failed ({started.returncode}):\n{started.stdout}\n{started.stderr}"
    state = json.loads((reports / "deployments" / "sec.json").read_text())
    (rank,) = state["ranks"]
    log = Path(rank["log"])
    try:
        pumps = _pumps_of(str(log))
        assert len(pumps) == 1, f"expected one pump process for {log}, found {pumps}"
        size = log.stat().st_size
        for _ in range(3):
            r = httpx.post(f"{state['urls'][0]}/v1/completions", json={"prompt": "hello", "max_tokens": 2}, timeout=60)
            assert r.status_code == 200, r.text
        time.sleep(1.0)
        assert _alive(rank["pid"]), "the rank died after serve start returned (its log pipe closed?)"
        assert log.stat().st_size > size, "nothing the rank wrote after serve start returned reached its log"
        st = serve("status", "sec", reports=reports)
        assert st.returncode == 0 and "healthy" in st.stdout, st.stdout + st.stderr
        assert not list((log.parent / ".private").glob("pump-*.json")), "the pump left its secrets file behind"
    finally:
        stopped = serve("stop", "sec", reports=reports)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert _gone_within(pumps) == [], "the pump outlived serve stop"
    leaked = [f for f in reports.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()]
    assert leaked == [], f"the planted secret is in {leaked}"
    assert "***" in log.read_text(errors="replace") or secret not in log.read_text(errors="replace")
