"""Fixtures of the history tests: synthetic run directories written through the real run store, and a real
PostgreSQL server (Debian's ``postgresql`` binaries, ``initdb`` + ``pg_ctl`` on a 127.0.0.1 port as the
``postgres`` user; skipped with the reason when absent, a failure with ``SSKJ_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance.store import PointStore
from pytest_sskj.records import new_row
from pytest_sskj.report.results import ResultsWriter
from pytest_sskj.rundir import atomic_write_json
from pytest_sskj.slo import parse_slo


def make_run(
    reports: Path,
    run_id: str,
    tps: Sequence[float],
    *,
    ttft_ms: Sequence[float] | None = None,
    backend: str = "parallel",
    isl: int = 512,
    osl: int = 16,
    chunk: int = 256,
    concurrency: int = 8,
    started: str = "2026-11-30T10:00:00+0000",
    **settings: Any,
) -> Path:
    """A finished run directory with one configuration: one passed row per value of ``tps`` (a repeat each),
    written the way a real run writes it (PointStore, ResultsWriter journal, manifest)."""
    run_dir = reports / run_id
    ttft = list(ttft_ms) if ttft_ms is not None else [100.0] * len(tps)
    base = {"engine": "embedded", "backends": [backend], "isl": isl, "osl": osl, "tp": 1, "ep": 1, "dp": 1, "pp": 1}
    base.update(endpoint="completions", platform=None, model_name=None, slo=["ttft_p95_ms<30000"])
    base.update(settings)
    manifest = {"run_id": run_id, "start_iso": started, "end_iso": started, "status": "finished", "settings": base}
    atomic_write_json(run_dir / "manifest.json", manifest)
    store, writer = PointStore(run_dir), ResultsWriter(run_dir)
    for i, (v, t) in enumerate(zip(tps, ttft, strict=True), 1):
        pid = f"{backend}-chunk{chunk}-c{concurrency}-r{i}"
        row = new_row(
            run_id=run_id,
            test_id=f"acceptance/test_serving.py::test_serving[{pid}]",
            engine=base["engine"],
            backend=backend,
            chunk=chunk,
            concurrency=concurrency,
            repeat=i,
            isl=isl,
            osl=osl,
            requests=4,
            point_id=pid,
            kind="serve",
            spec_key=f"{backend}-{chunk}",
        )
        row.update(status="passed", completed=4, failed=0, input_throughput=v, median_ttft_ms=t, p95_ttft_ms=t * 1.5)
        samples = {
            "ttft_ms": [t * f for f in (0.8, 1.0, 1.1, 1.3)],
            "e2e_latency_ms": [t * 2 * f for f in (0.9, 1, 1, 1.1)],
        }
        store.complete(row, parse_slo("ttft_p95_ms<30000"))
        store.write(pid, row, samples)
        writer.add_row(row)
    writer.add_verdict({"kind": "slo", "id": f"{backend}-chunk{chunk}-c{concurrency}", "passed": True, "message": "ok"})
    return run_dir


def _pg_bindir() -> Path | None:
    for cand in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (cand / "initdb").is_file() and (cand / "pg_ctl").is_file():
            return cand
    found = shutil.which("pg_ctl")
    return Path(found).parent if found and shutil.which("initdb") else None


def _unavailable(reason: str) -> None:
    if os.environ.get("SSKJ_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"SSKJ_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL server on 127.0.0.1 (password auth) for this session; its URL with the password."""
    bindir = _pg_bindir()
    if bindir is None:
        _unavailable(
            "PostgreSQL server binaries (initdb, pg_ctl) not in /usr/lib/postgresql/*/bin or on PATH; "
            "install them with .ci/install_postgres.sh"
        )
    assert bindir is not None
    as_user: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
            _unavailable("running as root without a 'postgres' user and runuser: postgres refuses to run as root")
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="sskj-pg-"))
    password = secrets.token_hex(8)
    (root / "pw").write_text(password + "\n")
    if as_user:
        shutil.chown(root, "postgres")
        shutil.chown(root / "pw", "postgres")
    port = _free_port()
    data, log = root / "data", root / "server.log"

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*as_user, *argv], capture_output=True, text=True, timeout=120, start_new_session=True)

    init = run(str(bindir / "initdb"), "-D", str(data), "-U", "sskj", "--auth=scram-sha-256", f"--pwfile={root / 'pw'}")
    if init.returncode:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    start = run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(log), "-w", "-t", "60", "start")
    if start.returncode:
        tail = log.read_text()[-2000:] if log.is_file() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed ({start.returncode}): {start.stderr[-1000:]}\n{tail}")
    try:
        yield f"postgresql://sskj:{password}@127.0.0.1:{port}/postgres"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
