"""The GPU inventory of this host: what NVML sees, filtered and ordered the way CUDA will see it.

:class:`GpuInfo` is one usable device (a whole GPU, or one MIG instance of a GPU in MIG mode) with its
index in CUDA order, NVML index, UUID, PCI bus id, name, compute capability, memory and running compute
processes.  :class:`Inventory` is the ordered tuple of them plus the driver facts, or, when it is empty,
the reason why (no ``nvidia-ml-py``, no driver, no GPU, ``CUDA_VISIBLE_DEVICES`` hiding everything).
:func:`read_nvml_inventory` is the NVML reader (``pynvml`` is imported lazily); it applies
``CUDA_VISIBLE_DEVICES`` (indices, ``GPU-`` and ``MIG-`` UUIDs and their unique prefixes) on top of
PCI-bus-id order, i.e. the order CUDA uses under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` -- which is not always
NVML's enumeration order.  :func:`load_inventory` asks the ``pytest_sskj_gpu_inventory`` hook first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pytest

__all__ = [
    "GpuInfo",
    "GpuProcess",
    "Inventory",
    "arch_of",
    "load_inventory",
    "parse_visible_devices",
    "pci_sort_key",
    "read_nvml_inventory",
]

_MIB = 1024 * 1024


class GpuProcess(NamedTuple):
    """A compute process on a GPU, as NVML reports it (``used_mib`` is ``None`` when NVML cannot tell)."""

    pid: int
    name: str
    used_mib: int | None


def arch_of(capability: tuple[int, int]) -> str:
    """``(9, 0)`` -> ``"sm90"``, ``(12, 0)`` -> ``"sm120"``, ``(10, 3)`` -> ``"sm103"``."""
    return f"sm{capability[0]}{capability[1]}"


def pci_sort_key(bus_id: str) -> tuple[int, int, int, int]:
    """Sort key of a PCI bus id ``DDDDDDDD:BB:DD.F`` (domain, bus, device, function), the order CUDA uses."""
    text = bus_id.strip().lower()
    try:
        domain, bus, devfn = text.split(":")[-3:] if text.count(":") >= 2 else ("0", *text.split(":"))
        dev, _, fn = devfn.partition(".")
        return int(domain, 16), int(bus, 16), int(dev, 16), int(fn or "0", 16)
    except ValueError:
        return (1 << 32, 0, 0, 0)  # unparsable ids sort last, in their given order (sorted() is stable)


@dataclass(frozen=True)
class GpuInfo:
    """One device a test or server can be given: a whole GPU, or one MIG instance.

    ``index`` is the CUDA device index in this process (position in the visible, PCI-ordered list);
    ``physical_index`` is the GPU's position among all GPUs of the host in PCI bus order (what
    ``CUDA_VISIBLE_DEVICES`` means under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``); ``nvml_index`` is NVML's.
    """

    index: int
    nvml_index: int
    uuid: str
    pci_bus_id: str
    name: str
    capability: tuple[int, int]
    memory_total_mib: int
    memory_used_mib: int
    memory_free_mib: int
    processes: tuple[GpuProcess, ...] = ()
    mig_mode: bool | None = None
    """MIG mode of the physical GPU: ``True``/``False``, ``None`` where the GPU has no MIG support."""
    physical_index: int | None = None
    parent_uuid: str | None = None
    """For a MIG instance: the UUID of its physical GPU (``uuid`` is then the ``MIG-...`` UUID)."""

    @property
    def arch(self) -> str:
        return arch_of(self.capability)

    @property
    def is_mig(self) -> bool:
        return self.parent_uuid is not None

    @property
    def label(self) -> str:
        """``NVIDIA H200 (sm90)``."""
        return f"{self.name} ({self.arch})"

    @property
    def visible_id(self) -> str:
        """The ``CUDA_VISIBLE_DEVICES`` entry for a child process (with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).

        A whole GPU is named by its PCI-order physical index (as ``nvidia-smi`` numbers it on ordinary
        hosts); a MIG instance by its ``MIG-`` UUID, the only way CUDA can address one.
        """
        if self.is_mig or self.physical_index is None:
            return self.uuid
        return str(self.physical_index)

    @property
    def memory_free_gib(self) -> float:
        return self.memory_free_mib / 1024.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "nvml_index": self.nvml_index,
            "physical_index": self.physical_index,
            "uuid": self.uuid,
            "parent_uuid": self.parent_uuid,
            "pci_bus_id": self.pci_bus_id,
            "name": self.name,
            "capability": f"{self.capability[0]}.{self.capability[1]}",
            "arch": self.arch,
            "memory_total_mib": self.memory_total_mib,
            "memory_used_mib": self.memory_used_mib,
            "memory_free_mib": self.memory_free_mib,
            "mig_mode": self.mig_mode,
            "processes": [p._asdict() for p in self.processes],
        }


@dataclass(frozen=True)
class Inventory:
    """The devices visible to this session, in CUDA order; ``reason`` says why it is empty."""

    gpus: tuple[GpuInfo, ...] = ()
    reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    """The CUDA version the driver supports, ``"13.0"``."""
    source: str = "nvml"
    visible_devices: str | None = None
    """The ``CUDA_VISIBLE_DEVICES`` that was applied (``None``: unset)."""
    notes: tuple[str, ...] = field(default=())
    """Warnings found while reading (a ``CUDA_VISIBLE_DEVICES`` entry that names no GPU, ...)."""

    def __len__(self) -> int:
        return len(self.gpus)

    def by_uuid(self, uuid: str) -> GpuInfo | None:
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        return None

    def summary(self) -> str:
        """``2 x NVIDIA H200 (sm90)`` (grouped by model, in first-seen order) or ``0 GPUs (<reason>)``."""
        if not self.gpus:
            return f"0 GPUs ({self.reason})" if self.reason else "0 GPUs"
        groups: dict[str, int] = {}
        for g in self.gpus:
            groups[g.label] = groups.get(g.label, 0) + 1
        return ", ".join(f"{n} x {label}" for label, n in groups.items())

    def facts(self) -> dict[str, Any]:
        """The manifest's ``gpu`` entry: names, capabilities, driver and CUDA version, every device."""
        return {
            "count": len(self.gpus),
            "summary": self.summary(),
            "reason": self.reason,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "source": self.source,
            "cuda_visible_devices": self.visible_devices,
            "notes": list(self.notes),
            "devices": [g.to_dict() for g in self.gpus],
        }

    def header_line(self) -> str:
        """The report header's line: ``gpu: 1 x NVIDIA H200 (sm90, 140.4 GiB), driver 580.1, CUDA 13.0``."""
        if not self.gpus:
            return f"gpu: none ({self.reason or 'no GPU found'})"
        parts: dict[str, int] = {}
        for g in self.gpus:
            key = f"{g.name} ({g.arch}, {g.memory_total_mib / 1024:.1f} GiB{', MIG' if g.is_mig else ''})"
            parts[key] = parts.get(key, 0) + 1
        text = "gpu: " + ", ".join(f"{n} x {k}" for k, n in parts.items())
        if self.driver_version:
            text += f", driver {self.driver_version}"
        if self.cuda_driver_version:
            text += f", CUDA {self.cuda_driver_version}"
        if self.visible_devices is not None:
            text += f", CUDA_VISIBLE_DEVICES={self.visible_devices}"
        return text


@dataclass(frozen=True)
class _Physical:
    """One physical GPU as NVML reports it, before ordering and filtering."""

    nvml_index: int
    uuid: str
    pci_bus_id: str
    name: str
    capability: tuple[int, int]
    total_mib: int
    used_mib: int
    free_mib: int
    processes: tuple[GpuProcess, ...]
    mig_mode: bool | None
    migs: tuple[tuple[str, int, int, int, tuple[GpuProcess, ...]], ...]
    """MIG instances: (MIG uuid, total MiB, used MiB, free MiB, its compute processes)."""


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Split ``CUDA_VISIBLE_DEVICES``; ``None`` when unset (every GPU visible), ``[]`` when it hides all."""
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _process_name(nvml: Any, pid: int) -> str:
    try:
        name = _text(nvml.nvmlSystemGetProcessName(pid))
    except Exception:  # NVML cannot name processes of other containers/users
        name = ""
    if not name:
        try:
            import psutil

            name = str(psutil.Process(pid).name())
        except Exception:  # the process may be gone or foreign
            name = "?"
    return os.path.basename(name) or name


def _processes(nvml: Any, handle: Any) -> tuple[GpuProcess, ...]:
    try:
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except nvml.NVMLError:
        return ()
    out = []
    for p in procs:
        used = getattr(p, "usedGpuMemory", None)
        used_mib = int(used) // _MIB if isinstance(used, int) and used >= 0 and used < (1 << 62) else None
        out.append(GpuProcess(int(p.pid), _process_name(nvml, int(p.pid)), used_mib))
    return tuple(out)


def _memory(nvml: Any, handle: Any) -> tuple[int, int, int]:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    return int(mem.total) // _MIB, int(mem.used) // _MIB, int(mem.free) // _MIB


def _read_physical(nvml: Any, i: int) -> _Physical:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    total, used, free = _memory(nvml, h)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(h)
        mig: bool | None = bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))
    except nvml.NVMLError:
        mig = None
    migs: list[tuple[str, int, int, int, tuple[GpuProcess, ...]]] = []
    if mig:
        for j in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
            try:
                mh = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except nvml.NVMLError:  # slot not populated
                continue
            migs.append((_text(nvml.nvmlDeviceGetUUID(mh)), *_memory(nvml, mh), _processes(nvml, mh)))
    return _Physical(
        nvml_index=i,
        uuid=_text(nvml.nvmlDeviceGetUUID(h)),
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower(),
        name=_text(nvml.nvmlDeviceGetName(h)),
        capability=(int(major), int(minor)),
        total_mib=total,
        used_mib=used,
        free_mib=free,
        processes=_processes(nvml, h),
        mig_mode=mig,
        migs=tuple(migs),
    )


def _devices_of(phys: _Physical, physical_index: int, only_mig: str | None = None) -> list[GpuInfo]:
    """The CUDA devices one physical GPU contributes: itself, or its MIG instances in MIG mode."""
    if not phys.mig_mode:
        return [
            GpuInfo(
                0,
                phys.nvml_index,
                phys.uuid,
                phys.pci_bus_id,
                phys.name,
                phys.capability,
                phys.total_mib,
                phys.used_mib,
                phys.free_mib,
                phys.processes,
                phys.mig_mode,
                physical_index,
            )
        ]
    return [
        GpuInfo(
            0,
            phys.nvml_index,
            uuid,
            phys.pci_bus_id,
            f"{phys.name} MIG",
            phys.capability,
            total,
            used,
            free,
            procs,
            True,
            physical_index,
            parent_uuid=phys.uuid,
        )
        for uuid, total, used, free, procs in phys.migs
        if only_mig is None or uuid == only_mig
    ]


def _select(ordered: Sequence[_Physical], visible: list[str] | None) -> tuple[list[GpuInfo], list[str]]:
    """Apply ``CUDA_VISIBLE_DEVICES`` entries to the PCI-ordered GPUs, CUDA's way.

    Entries are physical indices (PCI order), ``GPU-`` UUIDs, ``MIG-`` UUIDs or unique UUID prefixes;
    like CUDA, the first entry that names no device ends the list, and duplicates are errors there too.
    """
    notes: list[str] = []
    if visible is None:
        out: list[GpuInfo] = []
        for k, p in enumerate(ordered):
            out.extend(_devices_of(p, k))
        return out, notes
    chosen: list[GpuInfo] = []
    seen: set[str] = set()
    for entry in visible:
        found: list[GpuInfo] = []
        if entry.lstrip("-").isdigit():
            k = int(entry)
            if 0 <= k < len(ordered):
                found = _devices_of(ordered[k], k)
        else:
            want = entry.lower()
            matches: list[tuple[int, str | None]] = []
            for k, p in enumerate(ordered):
                if p.uuid.lower().startswith(want):
                    matches.append((k, None))
                matches.extend((k, m[0]) for m in p.migs if m[0].lower().startswith(want))
            if len(matches) > 1:
                notes.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches several devices; CUDA stops there")
                break
            for k, only_mig in matches:
                found = _devices_of(ordered[k], k, only_mig=only_mig)
        if not found:
            notes.append(
                f"CUDA_VISIBLE_DEVICES entry {entry!r} names no GPU of this host; CUDA ignores it and "
                f"every entry after it"
            )
            break
        if any(g.uuid in seen for g in found):
            notes.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} repeats a device; CUDA stops there")
            break
        seen.update(g.uuid for g in found)
        chosen.extend(found)
    return chosen, notes


def _cuda_version(nvml: Any) -> str | None:
    try:
        v = int(nvml.nvmlSystemGetCudaDriverVersion())
    except Exception:  # old drivers lack it
        return None
    return f"{v // 1000}.{(v % 1000) // 10}"


def read_nvml_inventory(
    environ: Mapping[str, str] | None = None, *, importer: Callable[[], Any] | None = None
) -> Inventory:
    """Read every GPU through NVML and return the ones ``CUDA_VISIBLE_DEVICES`` leaves, in CUDA order.

    Never raises for a missing library, driver or GPU: the inventory is then empty and ``reason`` says
    which.  ``importer`` returns the ``pynvml`` module (tests pass a fake).
    """
    env = os.environ if environ is None else environ
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    visible = parse_visible_devices(cvd)
    try:
        nvml = importer() if importer is not None else _import_pynvml()
    except ImportError as exc:
        return Inventory(
            reason=f"NVML: nvidia-ml-py is not installed ({exc}); pip install nvidia-ml-py", visible_devices=cvd
        )
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Inventory(reason=f"NVML: {_text(exc)} (no NVIDIA driver on this host?)", visible_devices=cvd)
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(nvml)
        count = int(nvml.nvmlDeviceGetCount())
        physical = [_read_physical(nvml, i) for i in range(count)]
    except nvml.NVMLError as exc:
        return Inventory(reason=f"NVML: reading the GPUs failed: {_text(exc)}", visible_devices=cvd)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    ordered = sorted(physical, key=lambda p: pci_sort_key(p.pci_bus_id))
    devices, notes = _select(ordered, visible)
    gpus = tuple(
        GpuInfo(
            i,
            d.nvml_index,
            d.uuid,
            d.pci_bus_id,
            d.name,
            d.capability,
            d.memory_total_mib,
            d.memory_used_mib,
            d.memory_free_mib,
            d.processes,
            d.mig_mode,
            d.physical_index,
            d.parent_uuid,
        )
        for i, d in enumerate(devices)
    )
    reason = None
    if not gpus:
        if count == 0:
            reason = "NVML: driver loaded but no GPU found"
        elif visible is not None:
            reason = f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {count} GPU(s) of this host"
        else:
            reason = f"all {count} GPU(s) are in MIG mode with no MIG instance created"
        if notes:
            reason += "; " + "; ".join(notes)
    return Inventory(
        gpus=gpus,
        reason=reason,
        driver_version=driver,
        cuda_driver_version=cuda,
        source="nvml",
        visible_devices=cvd,
        notes=tuple(notes),
    )


def _import_pynvml() -> Any:
    import pynvml

    return pynvml


def load_inventory(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Inventory:
    """The ``pytest_sskj_gpu_inventory`` hook's inventory if one answers, else :func:`read_nvml_inventory`."""
    result = config.hook.pytest_sskj_gpu_inventory(config=config)
    if result is not None:
        if not isinstance(result, Inventory):
            raise TypeError(
                f"pytest_sskj_gpu_inventory must return a pytest_sskj.gpu.inventory.Inventory, "
                f"got {type(result).__name__}"
            )
        return result
    return read_nvml_inventory(environ)
