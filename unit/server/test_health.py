"""Health: rank-0 probing per engine, fail-fast when any rank exits or logs a fatal signature, timeouts."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from pytest_sskj.errors import HealthTimeout, ServerLaunchError
from pytest_sskj.server.health import address_from_log, wait_healthy
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.pool import free_port
from pytest_sskj.server.spec import NodeCommand

# A test double of an SGLang rank 0: /health_generate answers 503 for the first N probes, then 200;
# it records every path it was asked for.
FAKE_RANK0 = r"""
import http.server, sys
port, ready_after, seen = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
count = {"n": 0}
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        open(seen, "a").write(self.path + "\n")
        if self.path == "/health_generate":
            count["n"] += 1
            code = 200 if count["n"] > ready_after else 503
        else:
            code = 404
        self.send_response(code); self.end_headers(); self.wfile.write(b"{}")
    def log_message(self, *a): pass
print("fake rank0 up", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def _start(tmp_path: Path, name: str, code: str, *args: str, rank: int = 0):  # type: ignore[no-untyped-def]
    cmd = NodeCommand("local", rank, (sys.executable, "-c", code, *args))
    return LocalLauncher().start(cmd, tmp_path / f"{name}.log")


def test_sglang_health_probes_rank0_health_generate_only(tmp_path: Path) -> None:
    port = free_port()
    seen = tmp_path / "seen.txt"
    r0 = _start(tmp_path, "r0", FAKE_RANK0, str(port), "2", str(seen))
    r1 = _start(tmp_path, "r1", "import time; print('rank 1 dummy'); time.sleep(60)", rank=1)
    try:
        report = wait_healthy("sglang", [r0, r1], [f"http://127.0.0.1:{port}"], timeout_s=20)
        paths = seen.read_text().split()
        assert set(paths) == {"/health_generate"}, f"rank 0 must be probed on /health_generate only, saw {paths}"
        assert len(paths) >= 3, f"503 twice then 200 means at least 3 probes, saw {len(paths)}"
        assert report.urls == (f"http://127.0.0.1:{port}",)
    finally:
        r0.terminate(5)
        r1.terminate(5)


def test_health_fails_fast_when_a_rank_exits(tmp_path: Path) -> None:
    r0 = _start(tmp_path, "r0", "import time; time.sleep(60)")
    r1 = _start(tmp_path, "r1", "import sys, time; print('loading'); print('fatal: no GPU'); sys.exit(5)", rank=1)
    t0 = time.perf_counter()
    try:
        with pytest.raises(ServerLaunchError) as ei:
            wait_healthy("sglang", [r0, r1], [f"http://127.0.0.1:{free_port()}"], timeout_s=60)
    finally:
        r0.terminate(5)
    took = time.perf_counter() - t0
    msg = str(ei.value)
    assert took < 10, f"a dead rank must fail the wait at once, not after the 60 s deadline (took {took:.1f} s)"
    assert "rank 1" in msg and "exited with code 5" in msg and "fatal: no GPU" in msg, msg


def test_health_fails_fast_on_fatal_log_signature(tmp_path: Path) -> None:
    code = "import time; print('RuntimeError: NCCL error: unhandled system error', flush=True); time.sleep(60)"
    r0 = _start(tmp_path, "r0", code)
    oracle = LogOracle("sglang")
    oracle.add(r0.log_path, "local", 0)
    try:
        with pytest.raises(ServerLaunchError, match=r"fatal log signature .*nccl: RuntimeError: NCCL error"):
            wait_healthy("sglang", [r0], [f"http://127.0.0.1:{free_port()}"], timeout_s=30, oracle=oracle)
    finally:
        r0.terminate(5)


def test_health_timeout_reports_last_probe_and_logs(tmp_path: Path) -> None:
    r0 = _start(tmp_path, "r0", "import time; print('still loading weights', flush=True); time.sleep(60)")
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.perf_counter()
    try:
        with pytest.raises(HealthTimeout) as ei:
            wait_healthy("vllm", [r0], [url], timeout_s=0.8)
    finally:
        r0.terminate(5)
    took = time.perf_counter() - t0
    assert 0.7 < took < 5, f"the deadline is 0.8 s, the wait took {took:.2f} s"
    msg = str(ei.value)
    assert f"{url}/health" in msg and "still loading weights" in msg and "--sskj-health-timeout" in msg, msg


def test_address_is_read_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "e.log"
    log.write_text("noise\nsskj-embedded: listening on http://127.0.0.1:41234 (slots 8)\n")
    assert address_from_log(log) == "http://127.0.0.1:41234"
    assert address_from_log(tmp_path / "none.log") is None


class _Clock:
    """A fake ``time``: ``sleep`` advances ``perf_counter`` and records the interval."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


class _NoHandle:
    """A rank that is running (``poll`` is ``None``) and logs nothing."""

    node, rank, log_path = "local", 0, Path("/nonexistent/log")

    def poll(self) -> int | None:
        return None


def _schedule(monkeypatch: pytest.MonkeyPatch, healthy_after_s: float) -> tuple[_Clock, list[float]]:
    from pytest_sskj.server import health

    clock = _Clock()
    probed: list[float] = []

    def probe(url: str, path: str, timeout_s: float = 5.0) -> tuple[int | None, str]:
        probed.append(clock.now - 100.0)
        return (200, "ok") if clock.now - 100.0 >= healthy_after_s else (None, "ConnectError: refused")

    monkeypatch.setattr(health, "probe", probe)
    monkeypatch.setattr("pytest_sskj.server.health.time", clock)  # only the health module's clock
    wait_healthy("embedded", [_NoHandle()], ["http://127.0.0.1:1"], timeout_s=30.0)  # type: ignore[list-item]
    return clock, probed


def test_a_quick_start_is_seen_within_one_short_poll_of_becoming_healthy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded engine is healthy 100-150 ms after its spawn: the poll must see it within one ``poll_s``
    (10 ms), not at the next step of a growing interval (it was 50-100 ms late at every start of a run)."""
    _clock, probed = _schedule(monkeypatch, healthy_after_s=0.13)
    late = probed[-1] - 0.13
    assert 0.0 <= late <= 0.01 + 1e-9, f"healthy at 130 ms, seen at {probed[-1] * 1000:.0f} ms ({late * 1000:.0f} late)"


def test_a_slow_start_is_polled_less_and_less_often_after_the_first_second(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, probed = _schedule(monkeypatch, healthy_after_s=20.0)
    fast = [s for s, t in zip(clock.sleeps, probed, strict=False) if t < 1.0]
    assert set(fast) == {0.01}, f"the first second is polled every 10 ms, saw intervals {sorted(set(fast))}"
    assert max(clock.sleeps) == 0.25, f"the interval grows to 0.25 s, saw at most {max(clock.sleeps)}"
    assert len(probed) < 100 + 19 / 0.25 + 10, f"{len(probed)} probes for a 20 s start: the interval did not grow"
