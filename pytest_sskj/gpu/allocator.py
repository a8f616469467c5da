"""Matching a :class:`~pytest_sskj.markers.GpuRequest` against an :class:`Inventory`, and the reasons.

Pure logic, no locks and no NVML: :func:`hardware_mismatch` says why one device can never serve a request
(architecture, capability, total memory), :func:`busy_reason` why it cannot serve it *now* (foreign
compute processes, too little free memory), :func:`unmet_reason` words a request the host cannot meet
the way users read it -- ``needs 1 x sm120, found 1 x NVIDIA H200 (sm90)`` or ``needs 2 x GPU, found
0 GPUs (NVML: ...)`` -- and :func:`choose` picks the devices to lease among the idle ones.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pytest_sskj.gpu.inventory import GpuInfo, Inventory
from pytest_sskj.markers import GpuRequest

__all__ = ["busy_reason", "choose", "hardware_matches", "hardware_mismatch", "unmet_reason"]


def hardware_mismatch(gpu: GpuInfo, request: GpuRequest) -> str | None:
    """Why ``gpu`` can never serve ``request`` (``None``: it can, when idle)."""
    if request.arch is not None and gpu.arch != request.arch:
        return f"{gpu.label} is not {request.arch}"
    if request.min_capability is not None and gpu.capability < request.min_capability:
        return (
            f"{gpu.label} has capability {gpu.capability[0]}.{gpu.capability[1]} < "
            f"{request.min_capability[0]}.{request.min_capability[1]}"
        )
    if request.min_free_gib is not None and gpu.memory_total_mib / 1024.0 < request.min_free_gib:
        return f"{gpu.label} has {gpu.memory_total_mib / 1024.0:.1f} GiB in all, < {request.min_free_gib:g} GiB"
    return None


def hardware_matches(inventory: Inventory, request: GpuRequest) -> list[GpuInfo]:
    """Devices of ``inventory`` that could serve ``request`` when idle, in CUDA order."""
    return [g for g in inventory.gpus if hardware_mismatch(g, request) is None]


def busy_reason(gpu: GpuInfo, request: GpuRequest, own_pids: Collection[int] = ()) -> str | None:
    """Why ``gpu`` cannot serve ``request`` right now (``None``: it is idle enough).

    Compute processes whose pid is in ``own_pids`` (this session's lease holders) are not foreign: a
    pytest worker keeps its CUDA context after a lease ends, and that must not block the next lease.
    """
    foreign = [p for p in gpu.processes if p.pid not in own_pids]
    if foreign:
        procs = ", ".join(
            f"pid {p.pid} {p.name}" + (f" ({p.used_mib} MiB)" if p.used_mib is not None else "") for p in foreign
        )
        return f"GPU {gpu.index} ({gpu.uuid}) runs foreign compute processes: {procs}"
    if request.min_free_gib is not None and gpu.memory_free_gib < request.min_free_gib:
        return (
            f"GPU {gpu.index} ({gpu.uuid}) has {gpu.memory_free_gib:.1f} GiB free, needs {request.min_free_gib:g} GiB"
        )
    return None


def unmet_reason(request: GpuRequest, inventory: Inventory) -> str | None:
    """The skip/fail reason when the hardware cannot meet ``request`` however long one waits, else ``None``.

    ``needs 1 x sm120, found 1 x NVIDIA H200 (sm90)``; ``needs 2 x GPU, found 0 GPUs (NVML: ...)``.
    """
    if len(hardware_matches(inventory, request)) >= request.count:
        return None
    text = f"needs {request.describe()}, found {inventory.summary()}"
    if inventory.gpus and request.min_free_gib is not None and request.arch is None and request.min_capability is None:
        biggest = max(g.memory_total_mib for g in inventory.gpus) / 1024.0
        text += f" with at most {biggest:.1f} GiB each"
    return text


def choose(candidates: Sequence[GpuInfo], count: int) -> list[GpuInfo]:
    """Pick ``count`` of the idle ``candidates``: fewest processes, most free memory, then CUDA order.

    Returns fewer than ``count`` when there are not enough; the result is in CUDA order.
    """
    ranked = sorted(candidates, key=lambda g: (len(g.processes), -g.memory_free_mib, g.index))
    return sorted(ranked[:count], key=lambda g: g.index) if len(ranked) >= count else []
