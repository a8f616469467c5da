"""Marker names, their registered descriptions, and the typed parse of ``@pytest.mark.gpu``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

__all__ = ["MARKERS", "GpuRequest", "parse_gpu_marker", "register_markers"]

MARKERS: dict[str, str] = {
    "gpu": "gpu(count=1, min_capability=None, arch=None, min_free_gib=None): the test needs GPUs; it gets a lease "
    "on idle ones (CUDA_VISIBLE_DEVICES set) or is skipped with the reason (failed with --sskj-require-gpu)",
    "acceptance": "acceptance: a serving acceptance test (launches or targets an inference server)",
    "slow": "slow: takes more than a few seconds; deselect with -m 'not slow'",
    "sskj_server": "sskj_server(**spec_overrides): overrides ServerSpec fields for the inference_server fixture",
}


def register_markers(config: pytest.Config) -> None:
    for desc in MARKERS.values():
        config.addinivalue_line("markers", desc)


@dataclass(frozen=True)
class GpuRequest:
    """What a ``gpu`` marker asks for."""

    count: int = 1
    min_capability: tuple[int, int] | None = None
    arch: str | None = None
    min_free_gib: float | None = None

    def describe(self) -> str:
        parts = [f"{self.count} x {self.arch or 'GPU'}"]
        if self.min_capability:
            parts.append(f"capability >= {self.min_capability[0]}.{self.min_capability[1]}")
        if self.min_free_gib:
            parts.append(f">= {self.min_free_gib:g} GiB free")
        return ", ".join(parts)


_GPU_KWARGS = ("count", "min_capability", "arch", "min_free_gib")


def _capability(value: object) -> tuple[int, int]:
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return int(value[0]), int(value[1])
    if isinstance(value, (int, float, str)):
        text = str(value)
        major, _, minor = text.partition(".")
        return int(major), int(minor or 0)
    raise TypeError(f"min_capability must be like (9, 0), 9.0 or '12.0', not {value!r}")


def parse_gpu_marker(mark: pytest.Mark) -> GpuRequest:
    """Parse ``gpu(count=..., min_capability=..., arch=..., min_free_gib=...)``; unknown args are errors."""
    if len(mark.args) > 1:
        raise TypeError(f"gpu marker takes at most one positional argument (count), got {mark.args!r}")
    kwargs = dict(mark.kwargs)
    if mark.args:
        if "count" in kwargs:
            raise TypeError("gpu marker got count both positionally and as a keyword")
        kwargs["count"] = mark.args[0]
    unknown = sorted(set(kwargs) - set(_GPU_KWARGS))
    if unknown:
        raise TypeError(f"gpu marker got unknown argument(s) {', '.join(unknown)}; accepted: {', '.join(_GPU_KWARGS)}")
    count = int(kwargs.get("count", 1))
    if count < 1:
        raise TypeError(f"gpu marker count must be >= 1, got {count}")
    arch = kwargs.get("arch")
    if arch is not None:
        arch = str(arch).lower()
        if not arch.startswith("sm") or not arch[2:].isdigit():
            raise TypeError(f"gpu marker arch must look like 'sm90' or 'sm120', got {arch!r}")
    cap = kwargs.get("min_capability")
    free = kwargs.get("min_free_gib")
    return GpuRequest(
        count=count,
        min_capability=_capability(cap) if cap is not None else None,
        arch=arch,
        min_free_gib=float(str(free)) if free is not None else None,
    )
