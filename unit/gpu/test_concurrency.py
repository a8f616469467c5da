"""Real concurrency: ``pytest -n 4`` and a second pytest session, all leasing the same two fake GPUs
through the real file-lock ledger, never hold the same GPU at the same time."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # xdist workers and a second session contending for leases

CONFTEST = """
import os, time
from pathlib import Path
from pytest_sskj.gpu.inventory import GpuInfo, Inventory

def pytest_sskj_gpu_inventory(config):
    return Inventory(gpus=tuple(
        GpuInfo(i, i, f"GPU-shared-{i}", f"00000000:{0x19 + i:02x}:00.0", "NVIDIA H200", (9, 0), 143771, 4, 143767,
                physical_index=i)
        for i in range(2)))

def pytest_collection_finish(session):
    # barrier: the 4 xdist workers of session A and session B start testing together, so they compete
    config = session.config
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None):
        return  # the xdist controller runs no tests
    d = Path(os.environ["SSKJ_TEST_BARRIER"])
    (d / f"{os.environ['SESSION_TAG']}-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while len(list(d.iterdir())) < 5 and time.monotonic() < deadline:
        time.sleep(0.02)
"""

TESTS = """
import json, os, time
import pytest

def record(gpus, lease):
    start = time.time()
    time.sleep(0.3)
    line = {"session": os.environ["SESSION_TAG"], "worker": os.environ.get("PYTEST_XDIST_WORKER", "-"),
            "pid": os.getpid(), "uuids": [g.uuid for g in gpus], "start": start, "end": time.time(),
            "waited_s": lease.waited_s, "cvd": os.environ["CUDA_VISIBLE_DEVICES"]}
    with open(os.environ["SSKJ_TEST_INTERVALS"], "a") as fh:
        fh.write(json.dumps(line) + "\\n")

@pytest.mark.parametrize("i", range(7))
@pytest.mark.gpu(count=1)
def test_one(i, gpus, gpu_lease):
    record(gpus, gpu_lease)

@pytest.mark.parametrize("i", range(3))
@pytest.mark.gpu(count=2)
def test_two(i, gpus, gpu_lease):
    record(gpus, gpu_lease)
"""


def test_xdist_workers_and_a_second_session_never_share_a_gpu(
    pytester: pytest.Pytester, ledger_path: Path, tmp_path: Path
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_shared=TESTS)
    intervals = tmp_path / "intervals.jsonl"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    base_env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")}
    base_env.update(
        SSKJ_GPU_LEDGER_DIR=str(ledger_path),
        SSKJ_TEST_INTERVALS=str(intervals),
        SSKJ_TEST_BARRIER=str(barrier),
        PYTHONDONTWRITEBYTECODE="1",
    )
    common = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--sskj-gpu-wait", "120"]
    procs = {
        "A": subprocess.Popen(
            [*common, "-n", "4"],
            cwd=pytester.path,
            env={**base_env, "SESSION_TAG": "A"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
        "B": subprocess.Popen(
            common,
            cwd=pytester.path,
            env={**base_env, "SESSION_TAG": "B"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ),
    }
    t0 = time.perf_counter()
    outs = {tag: p.communicate(timeout=300)[0] for tag, p in procs.items()}
    elapsed = time.perf_counter() - t0
    for tag, p in procs.items():
        assert p.returncode == 0, f"session {tag} failed (rc {p.returncode}):\n{outs[tag][-3000:]}"
        assert "10 passed" in outs[tag], f"session {tag} did not pass all 10 tests:\n{outs[tag][-3000:]}"

    rows = [json.loads(line) for line in intervals.read_text().splitlines()]
    assert len(rows) == 20, f"expected 20 recorded holds, got {len(rows)}"
    assert len({r["worker"] for r in rows if r["session"] == "A"}) >= 2, "xdist spread the tests over workers"
    for r in rows:
        assert r["cvd"] == ",".join(u.rsplit("-", 1)[1] for u in r["uuids"]), r

    by_uuid: dict[str, list[dict[str, object]]] = defaultdict(list)
    for r in rows:
        for u in r["uuids"]:
            by_uuid[u].append(r)
    overlaps = []
    for uuid, holds in by_uuid.items():
        holds.sort(key=lambda r: r["start"])  # type: ignore[arg-type, return-value]
        for a, b in itertools.pairwise(holds):
            if b["start"] < a["end"]:  # type: ignore[operator]
                overlaps.append((uuid, a, b))
    assert not overlaps, f"two holders had the same GPU at once: {overlaps}"

    # the sessions really ran at the same time and competed (otherwise the test would prove nothing)
    win = {
        tag: (min(r["start"] for r in rows if r["session"] == tag), max(r["end"] for r in rows if r["session"] == tag))
        for tag in ("A", "B")
    }
    assert win["A"][0] < win["B"][1] and win["B"][0] < win["A"][1], f"sessions did not overlap in time: {win}"
    assert sum(r["waited_s"] for r in rows) > 1.0, "no lease ever waited: there was no contention"
    assert json.loads((ledger_path / "ledger.json").read_text())["leases"] == {}, "every lease was released"
    print(f"20 holds on 2 GPUs by 5 processes in {elapsed:.1f} s, total wait {sum(r['waited_s'] for r in rows):.1f} s")
