"""PointRunner failure handling and the point store, with test doubles for the pool, server and bench."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

import pytest_sskj.bench.workload  # noqa: F401  (imported once, outside pytester's sys.modules snapshots)
from pytest_sskj.acceptance.matrix import Point
from pytest_sskj.acceptance.runner import PointRunner, config_mismatches
from pytest_sskj.acceptance.store import PointStore, StepLog
from pytest_sskj.errors import ServerCrashed, ServerLaunchError
from pytest_sskj.server.spec import ServerSpec
from pytest_sskj.stash import SETTINGS_KEY


@dataclass
class FakeFinding:
    category: str
    severity: str
    node: str = "local"
    line: str = "CUDA out of memory"
    excerpt: str = "| Traceback ...\n| torch.OutOfMemoryError: CUDA out of memory"

    def row(self) -> dict[str, Any]:
        return {"category": self.category, "severity": self.severity, "node": self.node, "line": self.line}

    def describe(self) -> str:
        return f"{self.severity} {self.category} on {self.node}: {self.line}"


@dataclass
class FakeServer:
    spec: ServerSpec
    urls: list[str] = field(default_factory=lambda: ["http://127.0.0.1:9"])
    dead: threading.Event = field(default_factory=threading.Event)
    findings: list[FakeFinding] = field(default_factory=list)
    external: bool = True  # no config re-check over HTTP in these tests
    commands: list[Any] = field(default_factory=list)
    log_paths: dict[str, Path] = field(default_factory=dict)

    def mark(self) -> int:
        return 0

    def findings_since(self, mark: Any) -> list[FakeFinding]:
        return list(self.findings)

    def check_alive(self) -> None:
        if self.dead.is_set():
            raise ServerCrashed(f"{self.spec.label}: local rank 0 exited with code -9\n  | last log line")

    def server_info(self) -> None:
        return None

    def config_problems(self) -> list[str]:
        return []


class FakePool:
    launcher = None  # no nodes to sample

    def __init__(self, fail_start: bool = False) -> None:
        self.fail_start = fail_start
        self.servers: dict[ServerSpec, FakeServer] = {}
        self.stopped: list[str] = []
        self.prepared: list[str] = []
        self.calls: list[tuple[str, bool, str | None]] = []
        """``(spec, a then hook given, ahead spec)`` per ``prepare``."""
        self.gets = 0

    def get(self, spec: ServerSpec) -> FakeServer:
        self.gets += 1
        if self.fail_start:
            raise ServerLaunchError(f"{spec.label}: local rank 0 exited with code 3 before it was healthy")
        return self.servers.setdefault(spec, FakeServer(spec))

    def prepare(self, spec: ServerSpec, then: Any = None, *, ahead: ServerSpec | None = None) -> None:
        self.prepared.append(spec.label)
        self.calls.append((spec.label, then is not None, ahead.label if ahead is not None else None))

    def stop(self, spec: ServerSpec) -> None:
        self.stopped.append(spec.label)
        server = self.servers.pop(spec, None)
        if server is not None:
            server.dead.set()


@dataclass
class FakeResult:
    metrics: dict[str, Any]
    failures: list[str] = field(default_factory=list)
    client_bound: bool = False
    stalled: str | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def samples(self, name: str) -> list[float]:
        return [10.0, 11.0, 12.0] if name != "tpot" else [1.0]


def good_bench(urls: list[str], workload: Any, out_dir: Path, **kw: Any) -> FakeResult:
    kw["progress"](workload.requests, workload.requests)
    n = workload.requests
    return FakeResult(
        {
            "completed": n,
            "failed": 0,
            "input_throughput": 1000.0,
            "median_ttft_ms": 11.0,
            "p95_ttft_ms": 12.0,
            "concurrency": 7.5,
        }
    )


@pytest.fixture
def runner(pytester: pytest.Pytester) -> tuple[PointRunner, list[dict[str, Any]]]:
    config = pytester.parseconfigure("--reports-dir", str(pytester.path / "reports"), "--run-id", "r1")
    rows: list[dict[str, Any]] = []

    class Collect:
        def pytest_sskj_point_finished(self, config: pytest.Config, result: dict[str, Any]) -> None:
            rows.append(result)

    config.pluginmanager.register(Collect())
    s = config.stash[SETTINGS_KEY]
    return PointRunner(config, s, PointStore(s.run_dir)), rows


def _p(backend: str = "serial", r: int = 1) -> Point:
    return Point(backend, 512, 8, r, 3)


def test_passed_point_row_follows_the_contract(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, rows = runner
    out = run.run(_p(), FakePool(), good_bench, test_id="t::x")
    assert out.passed, out.message
    row = rows[0]
    for key in (
        "run_id",
        "test_id",
        "engine",
        "backend",
        "chunk",
        "concurrency",
        "repeat",
        "isl",
        "osl",
        "requests",
        "status",
        "reasons",
        "findings",
        "client_bound",
        "input_throughput",
    ):
        assert key in row, f"result row lacks {key!r}"
    assert row["concurrency"] == 8 and row["measured_concurrency"] == 7.5, "configured C must not be overwritten"
    stored = json.loads((run.store.root / "serial-chunk512-c8-r1" / "result.json").read_text())
    assert stored["status"] == "passed" and stored["test_id"] == "t::x"
    assert run.store.read("serial-chunk512-c8-r1")[1]["ttft_ms"] == [10.0, 11.0, 12.0]  # type: ignore[index]


def test_crash_mid_point_fails_it_and_marks_the_rest_not_run(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, rows = runner
    pool = FakePool()

    def crashing_bench(urls: list[str], workload: Any, out_dir: Path, **kw: Any) -> FakeResult:
        server = next(iter(pool.servers.values()))
        server.dead.set()  # the server dies while requests are in flight ...
        assert server.dead.wait(5)
        return FakeResult({"completed": 3, "failed": 37}, failures=["request #4: no HTTP response"] * 37)

    out = run.run(_p(r=1), pool, crashing_bench)
    assert out.status == "failed" and out.row["category"] == "crash"
    assert out.message.startswith("[crash] server serial-chunk512 crashed during serial-chunk512-c8-r1"), out.message
    assert "exited with code -9" in out.message
    assert pool.stopped == ["serial-chunk512"], "the crashed server must be torn down"
    nxt = run.run(_p(r=2), pool, good_bench)
    assert nxt.status == "not_run" and nxt.message == "not run: server crashed at serial-chunk512-c8-r1"
    assert pool.gets == 1, "no launch may be attempted for a crashed spec"
    other = run.run(_p("parallel", 1), pool, good_bench)
    assert other.passed, "another spec is not affected"
    assert [r["status"] for r in rows] == ["failed", "not_run", "passed"]
    assert sorted(run.store.ids()) == ["parallel-chunk512-c8-r1", "serial-chunk512-c8-r1", "serial-chunk512-c8-r2"]


def test_after_the_bench_the_next_server_is_prepared_and_warmed_and_the_one_after_it_started_ahead(
    runner: tuple[PointRunner, list[dict[str, Any]]],
) -> None:
    """A B A B: after A1's bench B1's server is prepared with its warmup and A2's (a fresh server of the running
    spec) is started ahead; a next point on the same server prepares only the one after it; nothing is
    prepared for a point that is already measured or whose spec failed."""
    run, _ = runner
    pool = FakePool()
    run.run(_p("serial", 1), pool, good_bench, then=_p("parallel", 1), after=_p("serial", 2))
    assert pool.calls == [("parallel-chunk512", True, "serial-chunk512")], pool.calls
    pool.calls.clear()
    run.run(_p("parallel", 1), pool, good_bench, then=Point("parallel", 512, 16, 1, 3), after=_p("serial", 2))
    assert pool.calls == [("serial-chunk512", False, None)], f"same server next: only the one after it: {pool.calls}"
    pool.calls.clear()
    run.run(_p("serial", 2), pool, good_bench, then=_p("parallel", 1), after=_p("serial", 1))
    assert pool.calls == [], f"both upcoming points are measured already: nothing to prepare: {pool.calls}"


def test_variant_that_cannot_start(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, _ = runner
    pool = FakePool(fail_start=True)
    out = run.run(_p(r=1), pool, good_bench)
    assert out.message.startswith("[crash] server serial-chunk512 failed to start (ServerLaunchError)"), out.message
    assert run.run(_p(r=2), pool, good_bench).message == "not run: server failed to start at serial-chunk512-c8-r1"
    assert pool.gets == 1


def test_fatal_log_finding_fails_the_point_with_its_category(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, _ = runner
    pool = FakePool()
    pool.servers[run.spec_for(_p())] = FakeServer(run.spec_for(_p()), findings=[FakeFinding("oom", "fatal")])
    out = run.run(_p(), pool, good_bench)
    assert out.status == "failed" and out.message.startswith("[oom] fatal log finding during serial-chunk512-c8-r1")
    assert "torch.OutOfMemoryError" in out.message, "the log excerpt belongs in the message"


def test_oracle_failures_are_counted_n_of_n(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, _ = runner

    def short_bench(urls: list[str], workload: Any, out_dir: Path, **kw: Any) -> FakeResult:
        return FakeResult({"completed": 38, "failed": 2}, failures=["request #3: output_len 15 != 16"] * 2)

    out = run.run(_p(), FakePool(), short_bench)
    assert out.status == "failed" and out.row["category"] == "oracle"
    assert out.message.startswith("38/40 requests passed the strict oracle: request #3: output_len 15 != 16")


def test_resume_reads_finished_points_back_without_running(runner: tuple[PointRunner, list[dict[str, Any]]]) -> None:
    run, _ = runner
    run.run(_p(r=1), FakePool(), good_bench)
    crashed = dict(run.store.read("serial-chunk512-c8-r1")[0], point_id="x", status="failed", category="crash")  # type: ignore[index]
    run.store.write("serial-chunk512-c8-r2", crashed, {})
    resumed = PointRunner(run.config, replace(run.settings, resume="r1"), run.store)
    pool = FakePool()
    out = resumed.run(_p(r=1), pool, good_bench)
    assert out.resumed and out.passed and pool.gets == 0
    again = resumed.run(_p(r=2), pool, good_bench)
    assert not again.resumed and pool.gets == 1, "a crashed point is measured again on --resume"


def test_config_mismatch_sentences() -> None:
    spec = ServerSpec(engine="embedded", backend="parallel", chunk=512)
    assert config_mismatches(spec, {"total_slots": 8}) == []
    assert config_mismatches(spec, {"total_slots": 1}) == ["total_slots=1 (spec'd 8)"]
    assert config_mismatches(spec, None) == []


def test_step_log_survives_a_torn_last_line(tmp_path: Path) -> None:
    log = StepLog(tmp_path / "s" / "steps.jsonl")
    log.append({"concurrency": 16, "metrics": {"x": float("nan")}})
    with log.path.open("a") as fh:
        fh.write('{"concurrency": 32, "metr')
    assert log.read() == [{"concurrency": 16, "metrics": {"x": None}}]


def test_prompts_are_identical_across_backends_and_fresh_across_concurrencies(
    runner: tuple[PointRunner, list[dict[str, Any]]],
) -> None:
    run, _ = runner
    a, b = run.workload(Point("parallel", 512, 8, 1, 3)), run.workload(Point("serial", 512, 8, 1, 3))
    c16 = run.workload(Point("parallel", 512, 16, 1, 3))
    assert a == b, "A and B must see identical prompts (same seed, same shape)"
    assert a.seed != c16.seed, "a server reused across concurrencies must not see the same prompts again"
    assert run.workload(Point("x", 512, 32, 0, 0, kind="search")).requests == 64, "search steps send >= 2*C requests"


def _bound_bench(urls: list[str], workload: Any, out_dir: Path, **kw: Any) -> FakeResult:
    r = good_bench(urls, workload, out_dir, **kw)
    r.metrics["client_bound_reasons"] = "event-loop lag p90 41.83 ms > 10.00 ms allowed"
    r.client_bound = True
    return r


def test_client_bound_point_fails_with_its_category_and_evidence(
    runner: tuple[PointRunner, list[dict[str, Any]]],
) -> None:
    run, _ = runner
    out = run.run(_p(), FakePool(), _bound_bench)
    assert not out.passed and out.row["category"] == "client-bound", out.row
    assert out.message.startswith("[client-bound] serial-chunk512-c8-r1 is not a valid measurement"), out.message
    assert "event-loop lag p90 41.83 ms > 10.00 ms allowed" in out.message, "the evidence belongs in the message"
    assert "--sskj-allow-client-bound" in out.message


def test_allow_client_bound_passes_the_point_and_keeps_the_flag(
    runner: tuple[PointRunner, list[dict[str, Any]]],
) -> None:
    run, _ = runner
    run.settings = replace(run.settings, allow_client_bound=True)
    out = run.run(_p(), FakePool(), _bound_bench)
    assert out.passed and out.row["client_bound"] is True, out.row
    assert "allowed by --sskj-allow-client-bound" in out.row["notes"][0]


def test_a_measured_again_point_replaces_the_old_attempts_files(
    runner: tuple[PointRunner, list[dict[str, Any]]],
) -> None:
    run, _ = runner
    d = run.store.point_dir("serial-chunk512-c8-r1")
    (d / "requests.jsonl").write_text('{"aborted": 1}\n' * 41)
    out = run.run(_p(), FakePool(), good_bench)
    assert out.passed
    assert not (d / "requests.jsonl").exists(), "the aborted attempt's request lines must not survive"
