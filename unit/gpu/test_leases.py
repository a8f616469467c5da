"""The lease ledger: acquire, release, waiting, stale leases of dead processes, busy GPUs, MIG parents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_sskj.errors import GpuUnavailable
from pytest_sskj.gpu.inventory import GpuInfo, GpuProcess, Inventory
from pytest_sskj.gpu.leases import DEFAULT_LEDGER_DIR, Holder, LeaseLedger, ledger_dir, pid_alive
from pytest_sskj.markers import GpuRequest


def gpu(index: int, *, procs: tuple[GpuProcess, ...] = (), used: int = 0, parent: str | None = None) -> GpuInfo:
    uuid = f"MIG-{index}" if parent else f"GPU-{index}"
    return GpuInfo(
        index,
        index,
        uuid,
        f"0000:{index + 16:02x}:00.0",
        "NVIDIA H200",
        (9, 0),
        143771,
        used,
        143771 - used,
        procs,
        parent is not None,
        index,
        parent,
    )


TWO = Inventory(gpus=(gpu(0), gpu(1)))


def me(test_id: str = "t") -> Holder:
    return Holder.current(test_id)


def dead_pid() -> tuple[int, float | None]:
    """A pid that existed and is gone now (and its start time)."""
    from pytest_sskj.gpu.leases import process_start_time

    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = process_start_time(p.pid)
    p.wait()
    return p.pid, start


def test_ledger_dir_default_and_env_override(tmp_path: Path) -> None:
    assert ledger_dir({}) == DEFAULT_LEDGER_DIR == Path("/tmp/pytest-sskj-gpu-leases")
    assert ledger_dir({"SSKJ_GPU_LEDGER_DIR": str(tmp_path)}) == tmp_path


def test_acquire_writes_the_lease_and_release_removes_it(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    assert ledger.directory == ledger_path
    lease = ledger.acquire(GpuRequest(count=2), TWO, me("unit::a"))
    assert lease.uuids == ("GPU-0", "GPU-1")
    assert lease.env() == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    on_disk = json.loads((ledger_path / "ledger.json").read_text())["leases"]
    assert set(on_disk) == {"GPU-0", "GPU-1"}
    rec = on_disk["GPU-0"]
    assert (rec["pid"], rec["test_id"], rec["host"]) == (os.getpid(), "unit::a", me().host)
    assert rec["pid_start"] is not None and rec["since"] <= time.time()
    lease.release()
    lease.release()  # idempotent
    assert ledger.leases() == {}


def test_leased_gpu_is_not_given_twice_and_the_reason_names_the_holder(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    with ledger.acquire(GpuRequest(count=1), Inventory(gpus=(gpu(0),)), me("unit::holder")):
        with pytest.raises(GpuUnavailable) as info:
            ledger.acquire(GpuRequest(count=1), Inventory(gpus=(gpu(0),)), me("unit::second"), wait_s=0.3, poll_s=0.1)
        msg = str(info.value)
        assert msg.startswith("needs 1 x GPU, found 1 matching but only 0 idle after waiting 0 s: ")
        assert f"GPU 0 (GPU-0) leased by pid {os.getpid()}" in msg and "for unit::holder" in msg, msg
    assert ledger.leases() == {}, "leaving the with block releases"


def test_second_request_gets_the_other_gpu(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    a = ledger.acquire(GpuRequest(), TWO, me("a"))
    b = ledger.acquire(GpuRequest(), TWO, me("b"))
    assert {a.uuids, b.uuids} == {("GPU-0",), ("GPU-1",)}


def test_unmeetable_request_fails_at_once_without_waiting(ledger_path: Path) -> None:
    t0 = time.perf_counter()
    with pytest.raises(GpuUnavailable, match=r"^needs 1 x sm120, found 2 x NVIDIA H200 \(sm90\)$"):
        LeaseLedger().acquire(GpuRequest(arch="sm120"), TWO, me(), wait_s=30)
    assert time.perf_counter() - t0 < 5, "no waiting for hardware that does not exist"


def test_stale_lease_of_a_dead_pid_is_reclaimed(ledger_path: Path) -> None:
    pid, start = dead_pid()
    assert not pid_alive(pid, start)
    ledger_path.mkdir(parents=True)
    (ledger_path / "ledger.json").write_text(
        json.dumps(
            {
                "version": 1,
                "leases": {
                    "GPU-0": {
                        "pid": pid,
                        "pid_start": start,
                        "host": me().host,
                        "test_id": "killed::test",
                        "since": 1.0,
                    }
                },
                "participants": {str(pid): {"host": me().host, "pid_start": start}},
            }
        )
    )
    lease = LeaseLedger().acquire(GpuRequest(), Inventory(gpus=(gpu(0),)), me("new"))
    assert lease.uuids == ("GPU-0",)
    data = json.loads((ledger_path / "ledger.json").read_text())
    assert data["leases"]["GPU-0"]["test_id"] == "new"
    assert str(pid) not in data["participants"]
    assert data["reclaimed"][-1]["uuids"] == ["GPU-0"]


def test_reused_pid_does_not_keep_a_stale_lease(ledger_path: Path) -> None:
    # our own pid is alive, but it started at another time: the lease belonged to an earlier process
    assert pid_alive(os.getpid()) and not pid_alive(os.getpid(), start_time=12345.0)
    ledger_path.mkdir(parents=True)
    (ledger_path / "ledger.json").write_text(
        json.dumps(
            {
                "version": 1,
                "leases": {
                    "GPU-0": {
                        "pid": os.getpid(),
                        "pid_start": 12345.0,
                        "host": me().host,
                        "test_id": "old",
                        "since": 1.0,
                    }
                },
            }
        )
    )
    assert LeaseLedger().leases() == {}


def test_lease_of_another_host_is_kept(ledger_path: Path) -> None:
    ledger_path.mkdir(parents=True)
    (ledger_path / "ledger.json").write_text(
        json.dumps(
            {
                "version": 1,
                "leases": {"GPU-0": {"pid": 1, "pid_start": None, "host": "elsewhere", "test_id": "x", "since": 1.0}},
            }
        )
    )
    with pytest.raises(GpuUnavailable, match="leased by pid 1 on elsewhere for x"):
        LeaseLedger().acquire(GpuRequest(), Inventory(gpus=(gpu(0),)), me())


def test_waiter_gets_the_gpu_when_another_process_releases_it(ledger_path: Path, tmp_path: Path) -> None:
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from pytest_sskj.gpu.inventory import GpuInfo, Inventory\n"
        "from pytest_sskj.gpu.leases import Holder, LeaseLedger\n"
        "from pytest_sskj.markers import GpuRequest\n"
        "inv = Inventory(gpus=(GpuInfo(0, 0, 'GPU-0', '0000:10:00.0', 'NVIDIA H200', (9, 0), 1, 0, 1),))\n"
        "with LeaseLedger().acquire(GpuRequest(), inv, Holder.current('holder')):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(1.0)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    t0 = time.perf_counter()
    lease = LeaseLedger().acquire(GpuRequest(), Inventory(gpus=(gpu(0),)), me("waiter"), wait_s=30, poll_s=0.05)
    waited = time.perf_counter() - t0
    assert proc.wait(timeout=30) == 0
    assert lease.uuids == ("GPU-0",) and 0.3 < waited < 20, f"waited {waited:.2f} s for a 1 s holder"
    assert lease.waited_s == pytest.approx(waited, abs=0.1)


def test_foreign_process_blocks_but_a_participant_context_does_not(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        busy = Inventory(gpus=(gpu(0, procs=(GpuProcess(other.pid, "python3", 5000),)),))
        with pytest.raises(GpuUnavailable, match=f"runs foreign compute processes: pid {other.pid} python3"):
            ledger.acquire(GpuRequest(), busy, me(), wait_s=0)
        # once that pid has taken a lease itself it is a participant: its CUDA context no longer blocks
        ledger.acquire(GpuRequest(), Inventory(gpus=(gpu(1),)), Holder(other.pid, me().host, "other", None)).release()
        ledger.acquire(GpuRequest(), busy, me()).release()
    finally:
        other.kill()
        other.wait()
    # the participant is gone now: the next reader drops it, so a reused pid would count as foreign again
    LeaseLedger().leases()
    assert str(other.pid) not in json.loads((ledger_path / "ledger.json").read_text())["participants"]


def test_low_free_memory_waits_for_refresh(ledger_path: Path) -> None:
    full = Inventory(gpus=(gpu(0, used=140000),))
    freed = Inventory(gpus=(gpu(0, used=1000),))
    reads: list[Inventory] = [full, freed]
    lease = LeaseLedger().acquire(
        GpuRequest(min_free_gib=100),
        full,
        me(),
        wait_s=10,
        poll_s=0.01,
        refresh=lambda: reads.pop(0) if len(reads) > 1 else reads[0],
    )
    assert lease.uuids == ("GPU-0",)


def test_mig_instance_is_not_leased_while_its_parent_gpu_is(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    with ledger.acquire(GpuRequest(), Inventory(gpus=(gpu(7),)), me("whole")):
        mig = Inventory(gpus=(gpu(0, parent="GPU-7"),))
        with pytest.raises(GpuUnavailable, match=r"GPU 0 \(MIG-0\) leased by pid"):
            ledger.acquire(GpuRequest(), mig, me("mig"))
    lease = ledger.acquire(GpuRequest(), Inventory(gpus=(gpu(0, parent="GPU-7"),)), me("mig"))
    assert lease.env()["CUDA_VISIBLE_DEVICES"] == "MIG-0"


def test_release_pid_ends_every_lease_of_the_process(ledger_path: Path) -> None:
    ledger = LeaseLedger()
    ledger.acquire(GpuRequest(), TWO, me("a"))
    ledger.acquire(GpuRequest(), TWO, me("b"))
    assert sorted(ledger.release_pid(os.getpid())) == ["GPU-0", "GPU-1"]
    data = json.loads((ledger_path / "ledger.json").read_text())
    assert data["leases"] == {}
    assert str(os.getpid()) in data["participants"], "a live process stays a participant until it exits"


def test_finished_worker_whose_context_lingers_does_not_block_a_waiting_peer(ledger_path: Path) -> None:
    """The H200 case: xdist worker A ends its session (release_pid) but keeps its CUDA context until the
    controller shuts every worker down; worker B, still waiting, must get the device, not skip."""
    from pytest_sskj.gpu.leases import process_start_time

    worker_a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        holder_a = Holder(worker_a.pid, me().host, "gw0::test_a", process_start_time(worker_a.pid))
        ledger = LeaseLedger()
        ledger.acquire(GpuRequest(), Inventory(gpus=(gpu(0),)), holder_a)
        assert ledger.release_pid(worker_a.pid) == ["GPU-0"]
        lingering = Inventory(gpus=(gpu(0, procs=(GpuProcess(worker_a.pid, "python3", 1634),), used=1634),))
        lease = ledger.acquire(GpuRequest(), lingering, me("gw1::test_b"), wait_s=0)
        assert lease.uuids == ("GPU-0",)
        lease.release()
    finally:
        worker_a.kill()
        worker_a.wait()
    stranger = Inventory(gpus=(gpu(0, procs=(GpuProcess(worker_a.pid, "python3", 1634),), used=1634),))
    with pytest.raises(GpuUnavailable, match="foreign compute processes"):
        LeaseLedger().acquire(GpuRequest(), stranger, me("after"), wait_s=0)


def test_corrupt_ledger_is_set_aside_not_fatal(ledger_path: Path) -> None:
    ledger_path.mkdir(parents=True)
    (ledger_path / "ledger.json").write_text("{ half written")
    lease = LeaseLedger().acquire(GpuRequest(), TWO, me())
    assert lease.uuids == ("GPU-0",)
    assert list(ledger_path.glob("ledger.corrupt-*.json")), "the unreadable ledger is kept as evidence"


def test_context_left_under_a_foreign_namespace_pid_does_not_block_peers_while_its_holder_lives(
    ledger_path: Path,
) -> None:
    """Seen on the H200 VM: a worker's CUDA context outlives its lease and NVML reports it under a pid that
    is not the worker's own (PID namespaces), so pid matching alone made the next worker wait forever."""
    ledger = LeaseLedger()
    nvml_pid = 4_000_000  # no process of this namespace has it
    with_context = Inventory(gpus=(gpu(0, procs=(GpuProcess(nvml_pid, "python3", 1500),)),))
    holder_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        from pytest_sskj.gpu.leases import process_start_time

        holder = Holder(holder_proc.pid, me().host, "worker-1", process_start_time(holder_proc.pid))
        lease = ledger.acquire(GpuRequest(), Inventory(gpus=(gpu(0),)), holder, refresh=lambda: with_context)
        lease.release()  # the context is still there at release: recorded as that holder's resident
        data = json.loads((ledger_path / "ledger.json").read_text())
        assert data["residents"] == {"GPU-0": {str(holder_proc.pid): [nvml_pid]}}, data["residents"]
        ledger.acquire(GpuRequest(), with_context, me("worker-2")).release()
    finally:
        holder_proc.kill()
        holder_proc.wait()
    # the holder is gone, so is its context; a process still listed under that pid is somebody else's
    with pytest.raises(GpuUnavailable, match=f"runs foreign compute processes: pid {nvml_pid} python3"):
        ledger.acquire(GpuRequest(), with_context, me("worker-3"))
    assert json.loads((ledger_path / "ledger.json").read_text())["residents"] == {}
