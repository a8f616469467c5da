"""Test doubles of the GPU tests: a fake ``pynvml`` module following nvidia-ml-py's API shapes.

Handles, ``busId`` as bytes, memory in bytes, processes with ``pid``/``usedGpuMemory`` and ``NVMLError``
subclasses, so the real lazy ``import pynvml`` path of the inventory reader runs against it.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str
    name: str = "NVIDIA H200"
    capability: tuple[int, int] = (9, 0)
    total_mib: int = 143771
    used_mib: int = 0
    processes: list[tuple[int, str, int | None]] = field(default_factory=list)
    mig: bool | None = False
    migs: list[tuple[str, int, int]] = field(default_factory=list)  # (MIG uuid, total MiB, used MiB)
    mig_processes: dict[str, list[tuple[int, str, int | None]]] = field(default_factory=dict)


@dataclass
class FakeNvml:
    """The state behind the fake module; tests edit ``gpus`` and the failure switches."""

    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: str | None = None
    driver: str = "580.159.04"
    cuda: int = 13000
    process_names: dict[int, str] = field(default_factory=dict)

    def module(self) -> types.ModuleType:
        m = types.ModuleType("pynvml")
        state = self

        class NVMLError(Exception):
            def __init__(self, value: int, text: str = "") -> None:
                super().__init__(text or f"NVML error {value}")
                self.value = value

        class NVMLError_NotSupported(NVMLError):  # the real module's class name
            def __init__(self) -> None:
                super().__init__(3, "Not Supported")

        m.NVMLError = NVMLError  # type: ignore[attr-defined]
        m.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
        m.NVML_DEVICE_MIG_ENABLE = 1  # type: ignore[attr-defined]

        def gpu(h: Any) -> FakeGpu:
            return state.gpus[h[1]]

        def init() -> None:
            if state.init_error:
                raise NVMLError(12, state.init_error)

        def mem(h: Any) -> types.SimpleNamespace:
            if h[0] == "mig":
                _uuid, total, used = gpu(h).migs[h[2]]
            else:
                total, used = gpu(h).total_mib, gpu(h).used_mib
            return types.SimpleNamespace(total=total * MIB, used=used * MIB, free=(total - used) * MIB)

        def procs(h: Any) -> list[types.SimpleNamespace]:
            g = gpu(h)
            plist = g.mig_processes.get(g.migs[h[2]][0], []) if h[0] == "mig" else g.processes
            for pid, name, _ in plist:
                state.process_names[pid] = name
            return [
                types.SimpleNamespace(pid=pid, usedGpuMemory=None if used is None else used * MIB)
                for pid, _, used in plist
            ]

        def mig_mode(h: Any) -> list[int]:
            if gpu(h).mig is None:
                raise NVMLError_NotSupported()
            return [int(bool(gpu(h).mig)), int(bool(gpu(h).mig))]

        def mig_handle(h: Any, j: int) -> tuple[str, int, int]:
            if j >= len(gpu(h).migs):
                raise NVMLError(13, "Not Found")
            return ("mig", h[1], j)

        def uuid(h: Any) -> str:
            return gpu(h).migs[h[2]][0] if h[0] == "mig" else gpu(h).uuid

        def process_name(pid: int) -> bytes:
            if pid not in state.process_names:
                raise NVMLError(13, "Not Found")
            return state.process_names[pid].encode()

        funcs: dict[str, Any] = {
            "nvmlInit": init,
            "nvmlShutdown": lambda: None,
            "nvmlSystemGetDriverVersion": lambda: state.driver,
            "nvmlSystemGetCudaDriverVersion": lambda: state.cuda,
            "nvmlDeviceGetCount": lambda: len(state.gpus),
            "nvmlDeviceGetHandleByIndex": lambda i: ("gpu", i),
            "nvmlDeviceGetUUID": uuid,
            "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=gpu(h).bus_id.encode()),
            "nvmlDeviceGetName": lambda h: gpu(h).name,
            "nvmlDeviceGetCudaComputeCapability": lambda h: gpu(h).capability,
            "nvmlDeviceGetMemoryInfo": mem,
            "nvmlDeviceGetComputeRunningProcesses": procs,
            "nvmlSystemGetProcessName": process_name,
            "nvmlDeviceGetMigMode": mig_mode,
            "nvmlDeviceGetMaxMigDeviceCount": lambda h: 7,
            "nvmlDeviceGetMigDeviceHandleByIndex": mig_handle,
        }
        for name, fn in funcs.items():
            setattr(m, name, fn)
        return m
