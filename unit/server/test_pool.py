"""The server pool: one start per spec, stop-before-switch, failure caching, crash detection, /server_info, close."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from pytest_sskj.errors import ServerConfigMismatch, ServerCrashed, ServerLaunchError
from pytest_sskj.server.local import LocalLauncher, LocalProcess
from pytest_sskj.server.pool import ServerPool, free_port
from pytest_sskj.server.spec import NodeCommand, ServerSpec

PARALLEL = ServerSpec(engine="embedded", backend="parallel", chunk=512)
SERIAL = ServerSpec(engine="embedded", backend="serial", chunk=512)

# Test double of an SGLang deployment: rank 0 answers /health_generate and /server_info (JSON from argv).
FAKE_SGLANG_RANK0 = r"""
import http.server, json, sys
port, info = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = {"/health_generate": b"{}", "/server_info": info.encode()}.get(self.path)
        self.send_response(200 if body else 404); self.end_headers(); self.wfile.write(body or b"")
    def log_message(self, *a): pass
print("[TP0] Init torch distributed begin.", flush=True)
print("[TP0] The server is fired up and ready to roll!", flush=True)
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"""


class RecordingLauncher(LocalLauncher):
    """The local launcher, recording which earlier processes were still alive at every start."""

    def __init__(self) -> None:
        super().__init__()
        self.alive_at_start: list[list[int]] = []

    def start(self, cmd: NodeCommand, log_path: Path) -> LocalProcess:
        self.alive_at_start.append([pid for h in self.started for pid in h.pids()])
        return super().start(cmd, log_path)


def _pool(tmp_path: Path, **kw: object) -> ServerPool:
    return ServerPool(log_dir=tmp_path / "logs", model_cache_dir=tmp_path / "models", health_timeout_s=60, **kw)  # type: ignore[arg-type]


def test_pool_reuses_a_spec_and_stops_the_old_server_before_switching(tmp_path: Path) -> None:
    launcher = RecordingLauncher()
    pool = _pool(tmp_path, launcher=launcher)
    try:
        a = pool.get(PARALLEL)
        assert a.urls and a.urls[0].startswith("http://127.0.0.1:"), a.urls
        assert pool.get(PARALLEL) is a, "the same spec must reuse the running server"
        assert len(pool.launched) == 1
        old_pids = [p for pids in a.pids().values() for p in pids]
        b = pool.get(SERIAL)
        assert launcher.alive_at_start == [[], []], (
            f"the parallel server must be gone before the serial one starts: {launcher.alive_at_start}"
        )
        assert not any(psutil.pid_exists(p) for p in old_pids)
        assert b is not a and b.spec == SERIAL
        assert list(pool.running) == [SERIAL]
        assert b.startup_s is not None and b.startup_s < 30
        assert set(b.log_paths) == {"local/rank0"} and b.log_paths["local/rank0"].parent == tmp_path / "logs" / "local"
    finally:
        report = pool.close()
    assert report.clean and report.launched == 2, report.line()
    assert "every PID on every node is gone" in report.line()
    saved = json.loads((tmp_path / "logs" / "pool-teardown.json").read_text())
    assert saved["clean"] is True and saved["launched"] == 2
    with pytest.raises(ServerLaunchError, match="closed"):
        pool.get(PARALLEL)


def test_a_prepared_server_starts_beside_the_running_one_and_the_next_get_takes_it(tmp_path: Path) -> None:
    """``prepare`` (the embedded engine: cheap restarts, servers may share the machine for a moment) starts the
    next spec while the current one runs; ``get`` of it returns that server (one start) and stops the old one;
    a prepared server the next ``get`` does not ask for is kept idle until a ``prepare`` no longer names it,
    then stopped (its start counted); close leaves nothing."""
    launcher = RecordingLauncher()
    pool = _pool(tmp_path, launcher=launcher)
    try:
        a = pool.get(PARALLEL)
        old_pids = [p for pids in a.pids().values() for p in pids]
        pool.prepare(SERIAL)
        pool.prepare(SERIAL)  # already being prepared: nothing more starts
        assert pool.get(PARALLEL) is a, "the running spec is still served while the next one starts"
        b = pool.get(SERIAL)
        assert launcher.alive_at_start[1] == old_pids, (
            f"the serial server started beside the parallel one: {launcher.alive_at_start}"
        )
        assert b.alive() and list(pool.running) == [SERIAL] and not any(psutil.pid_exists(p) for p in old_pids)
        assert pool.starts == {PARALLEL.key(): 1, SERIAL.key(): 1}, pool.starts
        pool.prepare(PARALLEL)
        c = pool.get(PARALLEL.with_(chunk=256))  # not the prepared spec: the prepared one waits as a spare
        assert list(pool.running) == [PARALLEL.with_(chunk=256)] and c.alive()
        assert list(pool.spares) == [PARALLEL] and pool.spares[PARALLEL].alive(), pool.spares
        unused = [p for pids in pool.spares[PARALLEL].pids().values() for p in pids]
        pool.prepare(SERIAL)  # names neither it nor it as ahead: the spare is stopped here
        assert not pool.spares.get(PARALLEL) and not any(psutil.pid_exists(p) for p in unused), pool.spares
        assert pool.starts[PARALLEL.key()] == 2, "the unused prepared start is counted (a redundant start)"
    finally:
        report = pool.close()
    assert report.clean and report.launched == 5, report.line()


def test_a_server_started_ahead_waits_idle_and_its_turn_only_warms_it(tmp_path: Path) -> None:
    """``prepare(next, then=, ahead=)``: the server after next starts too (A B A B: a *fresh* server of the
    running spec), sits idle and unwarmed while the next one serves, and the ``prepare`` that makes it next
    only warms it (``then`` once, on that very server, no second start); nothing of it is handed out before
    every preparation ended."""
    pool = _pool(tmp_path)
    warmed: list[tuple[str, int]] = []

    def warm(tag: str) -> Any:
        return lambda server: warmed.append((tag, id(server)))

    try:
        a1 = pool.get(PARALLEL)
        pool.prepare(SERIAL, then=warm("s1"), ahead=PARALLEL)
        s1 = pool.get(SERIAL)
        assert not a1.alive(), "the running server of the other spec stops when the next one is handed out"
        a2 = pool.spares.get(PARALLEL)
        assert a2 is not None and a2 is not a1 and a2.alive(), f"a fresh parallel server waits as a spare: {a2}"
        assert warmed == [("s1", id(s1))], warmed
        assert pool.starts == {PARALLEL.key(): 2, SERIAL.key(): 1}, pool.starts
        pool.prepare(PARALLEL, then=warm("a2"), ahead=SERIAL)
        got = pool.get(PARALLEL)
        assert got is a2, "the spare is the server handed out: it was started one transition earlier"
        assert warmed[1:] == [("a2", id(a2))], f"the spare is warmed once, when its turn is next: {warmed}"
        assert pool.starts == {PARALLEL.key(): 2, SERIAL.key(): 2}, f"no second start of the spare: {pool.starts}"
        assert not s1.alive() and list(pool.running) == [PARALLEL] and list(pool.spares) == [SERIAL]
    finally:
        report = pool.close()
    assert report.clean and report.launched == 4, report.line()


def test_an_ahead_start_that_fails_raises_its_own_error_at_its_first_get(tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    bad = PARALLEL.with_(extra_args=("--batch", "0"))
    try:
        pool.get(SERIAL)
        pool.prepare(SERIAL.with_(chunk=256), ahead=bad)
        pool.get(SERIAL.with_(chunk=256))  # the failed ahead start is recorded, not raised here
        with pytest.raises(ServerLaunchError, match=r"--batch \(0\) must be >= 1") as e:
            pool.get(bad)
        assert "not retried" not in str(e.value), "its own launch error first, not the retry refusal"
        with pytest.raises(ServerLaunchError, match="not retried"):
            pool.get(bad)
    finally:
        assert pool.close().clean


def test_a_prepared_start_that_fails_raises_its_own_error_at_get_and_is_not_retried(tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    bad = PARALLEL.with_(extra_args=("--batch", "0"))
    try:
        pool.prepare(bad)
        with pytest.raises(ServerLaunchError, match=r"exited with code 2[\s\S]*--batch \(0\) must be >= 1") as e:
            pool.get(bad)
        assert "not retried" not in str(e.value), "its own launch error, not the retry refusal"
        with pytest.raises(ServerLaunchError, match="not retried"):
            pool.get(bad)
        assert len(pool.launched) == 1
    finally:
        assert pool.close().clean


def test_pool_detects_a_crash_and_fatal_log_lines_in_the_test_window(tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    try:
        server = pool.get(PARALLEL)
        mark = server.mark()
        assert server.findings_since(mark) == []
        server.check_alive()
        log = server.log_paths["local/rank0"]
        with log.open("a") as fh:  # what a dying engine would print
            fh.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
        (f,) = server.findings_since(mark)
        assert (f.category, f.severity, f.node, f.rank) == ("crash", "fatal", "local", 0), f
        with pytest.raises(ServerCrashed, match="illegal memory access"):
            server.check_alive()
        pid = server.handles[0].pids()[0]
        os.kill(pid, signal.SIGKILL)
        deadline = time.perf_counter() + 10
        while server.alive() and time.perf_counter() < deadline:
            time.sleep(0.05)
        with pytest.raises(ServerCrashed, match="killed by SIGKILL"):
            server.check_alive()
        again = pool.get(PARALLEL)
        assert again is not server and again.alive(), "a dead server is replaced on the next get()"
    finally:
        assert pool.close().clean


def test_a_spec_that_fails_to_start_is_not_retried(tmp_path: Path) -> None:
    pool = _pool(tmp_path)
    bad = PARALLEL.with_(extra_args=("--batch", "0"))
    try:
        with pytest.raises(ServerLaunchError, match=r"exited with code 2[\s\S]*--batch \(0\) must be >= 1"):
            pool.get(bad)
        t0 = time.perf_counter()
        with pytest.raises(ServerLaunchError, match="not retried"):
            pool.get(bad)
        assert time.perf_counter() - t0 < 0.5 and len(pool.launched) == 1
    finally:
        assert pool.close().clean


def test_target_url_launches_nothing(tmp_path: Path) -> None:
    pool = _pool(tmp_path, target_url="http://10.0.0.1:30000/")
    server = pool.get(PARALLEL)
    assert server.external and server.urls == ["http://10.0.0.1:30000"] and server.handles == []
    assert server.findings_since(server.mark()) == []
    server.check_alive()
    assert pool.close().launched == 0


def _fake_sglang(info: dict[str, object]):  # type: ignore[no-untyped-def]
    def commands_for(spec: ServerSpec) -> list[NodeCommand]:
        rank0 = NodeCommand(
            "local", 0, (sys.executable, "-c", FAKE_SGLANG_RANK0, str(spec.port), json.dumps(info)), port=spec.port
        )
        rank1 = NodeCommand("local", 1, (sys.executable, "-c", "import time; time.sleep(120)"), serves_http=False)
        return [rank0, rank1]

    return commands_for


SGLANG = ServerSpec(engine="sglang", backend="flashinfer_mxfp4", chunk=8192, tp=2, ep=2)
GOOD_INFO = {
    "moe_runner_backend": "flashinfer_mxfp4",
    "chunked_prefill_size": 8192,
    "tp_size": 2,
    "ep_size": 2,
    "dp_size": 1,
    "pp_size": 1,
    "disable_radix_cache": True,
    "nnodes": 1,
    "node_rank": 0,
}


def test_sglang_server_info_is_verified_after_health(tmp_path: Path) -> None:
    pool = _pool(tmp_path, commands_for=_fake_sglang(GOOD_INFO))
    try:
        server = pool.get(SGLANG)
        assert server.server_info() == GOOD_INFO
        assert len(server.handles) == 2 and server.urls == [server.urls[0]]
        assert ":30000" not in server.urls[0], "port 0 in the spec must become a free port for a local launch"
    finally:
        assert pool.close().clean


def test_sglang_server_info_mismatch_fails_and_stops_the_server(tmp_path: Path) -> None:
    pool = _pool(tmp_path, commands_for=_fake_sglang({**GOOD_INFO, "moe_runner_backend": "marlin"}))
    with pytest.raises(ServerConfigMismatch, match="moe_runner_backend: spec flashinfer_mxfp4, server reports marlin"):
        pool.get(SGLANG)
    assert all(h.pids() == [] for h in pool.launched), "a mismatching server must be stopped"
    assert pool.close().clean


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
