"""The option rows the deploy subsystem owns: the parallel sizes of the run's one server and the GPUs per node."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["PARALLELISM", "register"]

PARALLELISM: tuple[Option, ...] = (
    # --- parallelism ----------------------------------------------------------------------------
    Option(
        "tp",
        ("--tp",),
        "int",
        "Tensor-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "ep",
        ("--ep",),
        "int",
        "Expert-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "dp",
        ("--dp",),
        "int",
        "Data-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "pp",
        ("--pp",),
        "int",
        "Pipeline-parallel size (default 1)",
        default=1,
        lo=1,
        hi=1024,
        unit="GPUs",
        bound_why="the largest layout one server spans",
    ),
    Option(
        "gpus_per_node",
        ("--sskj-gpus-per-node",),
        "int",
        "GPUs on every node (default 8)",
        default=8,
        lo=1,
        hi=64,
        unit="GPUs",
        bound_why="no node holds more",
    ),
)
"""Tensor/expert/data/pipeline-parallel sizes and GPUs per node."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``)."""
    registry.add_options(*PARALLELISM)
