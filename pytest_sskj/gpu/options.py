"""The option rows the GPU subsystem owns: what a gpu-marked test does when its GPUs are busy or missing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import DAY_S, Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["GPUS", "register"]

GPUS: tuple[Option, ...] = (
    # --- GPUs -----------------------------------------------------------------------------------
    Option(
        "require_gpu",
        ("--sskj-require-gpu",),
        "bool",
        "Fail, instead of skip, tests whose GPU request cannot be met (release runs)",
        default=False,
    ),
    Option(
        "gpu_wait_s",
        ("--sskj-gpu-wait",),
        "float",
        "Seconds a gpu-marked test waits for busy matching GPUs (leased by another worker or session, "
        "foreign processes, too little free memory) before it is skipped (default 600)",
        default=600.0,
        lo=0,
        hi=DAY_S,
        unit="s",
    ),
)
"""GPU requests of gpu-marked tests."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``)."""
    registry.add_options(*GPUS)
