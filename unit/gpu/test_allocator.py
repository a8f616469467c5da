"""Matching requests to devices: the exact skip reasons, busy devices, and the choice among idle ones."""

from __future__ import annotations

from pytest_sskj.gpu.allocator import busy_reason, choose, hardware_mismatch, unmet_reason
from pytest_sskj.gpu.inventory import GpuInfo, GpuProcess, Inventory
from pytest_sskj.markers import GpuRequest


def h200(index: int, *, used: int = 0, procs: tuple[GpuProcess, ...] = ()) -> GpuInfo:
    total = 143771
    return GpuInfo(
        index,
        index,
        f"GPU-h200-{index}",
        f"0000:{index + 16:02x}:00.0",
        "NVIDIA H200",
        (9, 0),
        total,
        used,
        total - used,
        procs,
        False,
        index,
    )


def pro6000(index: int) -> GpuInfo:
    return GpuInfo(
        index,
        index,
        f"GPU-pro-{index}",
        f"0000:{index + 16:02x}:00.0",
        "NVIDIA RTX PRO 6000",
        (12, 0),
        97887,
        0,
        97887,
        (),
        None,
        index,
    )


def test_arch_mismatch_reason_is_exactly_what_users_read() -> None:
    inv = Inventory(gpus=(h200(0),))
    assert unmet_reason(GpuRequest(count=1, arch="sm120"), inv) == "needs 1 x sm120, found 1 x NVIDIA H200 (sm90)"


def test_no_gpu_reason_carries_the_inventory_reason() -> None:
    inv = Inventory(reason="NVML: Driver Not Loaded (no NVIDIA driver on this host?)")
    assert unmet_reason(GpuRequest(count=2), inv) == (
        "needs 2 x GPU, found 0 GPUs (NVML: Driver Not Loaded (no NVIDIA driver on this host?))"
    )


def test_too_few_gpus_and_mixed_hosts() -> None:
    inv = Inventory(gpus=(h200(0), pro6000(1)))
    assert unmet_reason(GpuRequest(count=2, arch="sm120"), inv) == (
        "needs 2 x sm120, found 1 x NVIDIA H200 (sm90), 1 x NVIDIA RTX PRO 6000 (sm120)"
    )
    assert unmet_reason(GpuRequest(count=1, arch="sm120"), inv) is None
    assert unmet_reason(GpuRequest(count=2), inv) is None


def test_min_capability_gate_keeps_sm90_off_blackwell_paths() -> None:
    inv = Inventory(gpus=(h200(0),))
    req = GpuRequest(count=1, min_capability=(10, 0))
    assert unmet_reason(req, inv) == "needs 1 x GPU, capability >= 10.0, found 1 x NVIDIA H200 (sm90)"
    assert hardware_mismatch(h200(0), req) == "NVIDIA H200 (sm90) has capability 9.0 < 10.0"
    assert hardware_mismatch(pro6000(0), req) is None


def test_memory_request_larger_than_any_card_is_unmet_not_busy() -> None:
    inv = Inventory(gpus=(h200(0),))
    assert unmet_reason(GpuRequest(min_free_gib=200), inv) == (
        "needs 1 x GPU, >= 200 GiB free, found 1 x NVIDIA H200 (sm90) with at most 140.4 GiB each"
    )
    assert unmet_reason(GpuRequest(min_free_gib=100), inv) is None


def test_foreign_processes_and_low_free_memory_make_a_gpu_busy() -> None:
    busy = h200(3, used=90000, procs=(GpuProcess(4242, "python3", 89000),))
    assert busy_reason(busy, GpuRequest()) == (
        "GPU 3 (GPU-h200-3) runs foreign compute processes: pid 4242 python3 (89000 MiB)"
    )
    assert busy_reason(busy, GpuRequest(), own_pids={4242}) is None, "our own workers' contexts are not foreign"
    assert busy_reason(busy, GpuRequest(min_free_gib=80), own_pids={4242}) == (
        "GPU 3 (GPU-h200-3) has 52.5 GiB free, needs 80 GiB"
    )
    assert busy_reason(h200(0), GpuRequest(min_free_gib=80)) is None


def test_choose_prefers_idle_roomy_gpus_and_returns_cuda_order() -> None:
    a = h200(0, used=50000)
    b = h200(1)
    c = h200(2, procs=(GpuProcess(1, "ours", 10),))
    d = h200(3, used=1000)
    assert [g.index for g in choose([a, b, c, d], 2)] == [1, 3]
    assert choose([a, b], 3) == [], "not enough idle devices: nothing, never a partial lease"
