"""The server fixtures end to end in a real pytest subprocess: sharing, specs, report sections, teardown paths."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

RECORDER = """
import json, os, signal, time
from pathlib import Path

import pytest

OUT = Path(os.environ["SSKJ_TEST_OUT"])


def record(name, server):
    pids = [p for ps in server.pids().values() for p in ps]
    with OUT.open("a") as fh:
        fh.write(json.dumps({"test": name, "url": server.urls[0], "pids": pids, "backend": server.spec.backend,
                             "chunk": server.spec.chunk, "worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\\n")
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _records(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def _all_pids(records: list[dict[str, object]]) -> set[int]:
    return {int(p) for r in records for p in r["pids"]}  # type: ignore[attr-defined]


@pytest.fixture
def env_out(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    out = pytester.path / "records.jsonl"
    monkeypatch.setenv("SSKJ_TEST_OUT", str(out))
    return out


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--reports-dir",
        str(pytester.path / "reports"),
        "--run-id",
        "r1",
        "--chunk",
        "512",
        *args,
        timeout=180,
    )


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_tests_share_a_server_per_spec_and_failures_get_log_sections(pytester: pytest.Pytester, env_out: Path) -> None:
    pytester.makepyfile(
        RECORDER
        + """
def test_a(inference_server):
    record("a", inference_server)

def test_b(inference_server):
    record("b", inference_server)

@pytest.mark.sskj_server(backend="serial")
def test_c(inference_server):
    record("c", inference_server)

@pytest.mark.parametrize("inference_server", [{"chunk": 256}], indirect=True)
def test_d(inference_server):
    record("d", inference_server)

def test_e_fails(inference_server):
    with inference_server.log_paths["local/rank0"].open("a") as fh:
        fh.write("RuntimeError: NCCL error: unhandled system error\\n")
    assert False, "deliberate"
"""
    )
    result = _run(pytester)
    result.assert_outcomes(passed=4, failed=1)
    recs = {r["test"]: r for r in _records(env_out)}
    assert recs["a"]["url"] == recs["b"]["url"], "tests of one spec must share one server"
    assert (recs["c"]["backend"], recs["d"]["chunk"]) == ("serial", 256), recs
    assert len({recs[k]["url"] for k in "acd"}) == 3, f"three specs, three servers: {recs}"
    out = result.stdout.str()
    assert "sskj server findings" in out and "fatal nccl on local rank 0" in out, out[-3000:]
    assert "sskj server log tail" in out and "sskj-embedded: listening on" in out, out[-3000:]
    result.stdout.fnmatch_lines(
        ["*sskj: server pool closed in * 4 launched process(es), every PID on every node is gone*"]
    )
    left = [p for p in _all_pids(list(recs.values())) if _alive(p)]
    assert left == [], f"server processes left after the session: {left}"
    assert json.loads((pytester.path / "reports" / "r1" / "logs" / "pool-teardown.json").read_text())["clean"]


@pytest.mark.slow
def test_sigterm_closes_the_pool_then_dies_of_sigterm(pytester: pytest.Pytester, env_out: Path) -> None:
    pytester.makepyfile(
        RECORDER
        + """
def test_killed(inference_server):
    record("k", inference_server)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
"""
    )
    result = _run(pytester)
    # SIGTERM unwinds the session like Ctrl-C (issue 13: an interrupted run, manifest completed, exit status 2)
    assert result.ret == pytest.ExitCode.INTERRUPTED, f"pytest should end as interrupted, got {result.ret}"
    # the pool is closed by the unwinding session (after the bench cancelled its requests), not inside the signal
    # handler: the ordinary close line, every process gone
    result.stdout.fnmatch_lines(["*sskj: server pool closed in *, every PID on every node is gone*"])
    pids = _all_pids(_records(env_out))
    assert pids and not [p for p in pids if _alive(p)], f"processes left after SIGTERM: {pids}"


@pytest.mark.slow
def test_ctrl_c_tears_the_servers_down(pytester: pytest.Pytester, env_out: Path) -> None:
    pytester.makepyfile(
        RECORDER
        + """
def test_interrupted(inference_server):
    record("i", inference_server)
    raise KeyboardInterrupt
"""
    )
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*every PID on every node is gone*"])
    pids = _all_pids(_records(env_out))
    assert pids and not [p for p in pids if _alive(p)], f"processes left after Ctrl-C: {pids}"


@pytest.mark.slow
def test_a_timed_out_test_gets_a_fresh_server_for_the_next(pytester: pytest.Pytester, env_out: Path) -> None:
    pytester.makepyfile(
        RECORDER
        + """
@pytest.mark.timeout(2, method="signal", func_only=True)
def test_hangs(inference_server):
    record("hang", inference_server)
    time.sleep(10)

def test_next(inference_server):
    record("next", inference_server)
"""
    )
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    recs = {r["test"]: r for r in _records(env_out)}
    assert recs["hang"]["url"] != recs["next"]["url"], "the timed-out test's server must be replaced"
    assert not [p for p in recs["hang"]["pids"] if _alive(p)]  # type: ignore[attr-defined]
    # the default server is the embedded baseline, microbatch since issue 12
    assert "the test timed out: server microbatch-chunk512 was stopped" in result.stdout.str()


@pytest.mark.slow
def test_xdist_workers_have_their_own_pools_and_ports(pytester: pytest.Pytester, env_out: Path) -> None:
    pytester.makepyfile(
        RECORDER
        + """
import time as _t

@pytest.mark.parametrize("i", range(2))
def test_w(inference_server, i):
    record(f"w{i}", inference_server)
    _t.sleep(1.0)
"""
    )
    result = _run(pytester, "-n", "2")
    result.assert_outcomes(passed=2)
    recs = _records(env_out)
    assert {r["worker"] for r in recs} == {"gw0", "gw1"}, recs
    assert len({r["url"] for r in recs}) == 2, f"each worker starts its own server on its own port: {recs}"
    logs = sorted(p.name for p in (pytester.path / "reports" / "r1" / "logs" / "local").iterdir())
    assert any("-gw0-" in n for n in logs) and any("-gw1-" in n for n in logs), logs
    assert not [p for p in _all_pids(recs) if _alive(p)]


@pytest.mark.slow
def test_reaper_stops_servers_when_pytest_dies_without_teardown(pytester: pytest.Pytester, env_out: Path) -> None:
    """pytest-timeout's thread method ends pytest with os._exit: no teardown runs, the reaper must act."""
    pytester.makepyfile(
        RECORDER
        + """
@pytest.mark.timeout(1, method="thread", func_only=True)
def test_hangs(inference_server):
    record("t", inference_server)
    time.sleep(30)
"""
    )
    result = _run(pytester)
    assert result.ret not in (0, pytest.ExitCode.INTERRUPTED), f"pytest should have been cut off, got {result.ret}"
    pids = _all_pids(_records(env_out))
    assert pids, "the test did not record its server"
    deadline = time.perf_counter() + 20
    while [p for p in pids if _alive(p)] and time.perf_counter() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], f"the reaper left server processes running: {pids}"
    log = pytester.path / "reports" / ".cache" / "reaper" / "r1.log"
    while "still running:" not in log.read_text() and time.perf_counter() < deadline:
        time.sleep(0.1)
    reaper_log = log.read_text()
    assert "is gone; stopping" in reaper_log and "still running: none" in reaper_log, reaper_log


class _Node:
    def __init__(self, mark: pytest.Mark | None) -> None:
        self.mark = mark

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self.mark if self.mark is not None and self.mark.name == name else None


class _Request:
    """Test double of a FixtureRequest: only ``param`` and ``node`` are read."""

    def __init__(self, param: object = None, mark: pytest.Mark | None = None) -> None:
        if param is not None:
            self.param = param
        self.node = _Node(mark)


def _settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    from pytest_sskj.settings import resolve_settings
    from pytest_sskj.subsystems import build_registry

    class _Config:
        def getoption(self, name: str, default: object = None) -> object:
            return {"sskj_reports_dir": str(tmp_path)}.get(name, default)

        def getini(self, name: str) -> object:
            return None

    return resolve_settings(_Config(), build_registry(), environ={})  # type: ignore[arg-type]


def test_spec_resolution_order_param_then_marker_then_default(tmp_path: Path) -> None:
    from pytest_sskj.server.fixtures import resolve_spec
    from pytest_sskj.server.spec import ServerSpec

    s = _settings(tmp_path)
    default = resolve_spec(_Request(), s)  # type: ignore[arg-type]
    assert (default.engine, default.backend, default.chunk) == ("embedded", "microbatch", s.chunks[0])
    marked = resolve_spec(_Request(mark=pytest.mark.sskj_server(backend="serial", chunk=128).mark), s)  # type: ignore[arg-type]
    assert (marked.backend, marked.chunk) == ("serial", 128)
    both = resolve_spec(_Request({"chunk": 64}, pytest.mark.sskj_server(backend="serial", chunk=128).mark), s)  # type: ignore[arg-type]
    assert (both.backend, both.chunk) == ("serial", 64), "the indirect param wins over the marker"
    assert resolve_spec(_Request("serial"), s).backend == "serial"  # type: ignore[arg-type]
    explicit = ServerSpec(engine="embedded", backend="serial", port=1234)
    assert resolve_spec(_Request(explicit), s) is explicit  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown ServerSpec field"):
        resolve_spec(_Request({"chunk_size": 1}), s)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keyword overrides only"):
        resolve_spec(_Request(mark=pytest.mark.sskj_server("serial").mark), s)  # type: ignore[arg-type]
