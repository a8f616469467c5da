"""Serving engines as units: the declared interface (:mod:`.base`), the registry, one module per engine.

Callers use :func:`get_engine` (and :func:`node_commands`); only :mod:`.registry` imports engine modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.engines.base import Engine
from pytest_sskj.engines.registry import (
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    ENGINES,
    UnknownEngine,
    cache_resets,
    get_engine,
    node_commands,
    router_argv,
)

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "ENGINE_NAMES",
    "Engine",
    "UnknownEngine",
    "cache_resets",
    "get_engine",
    "node_commands",
    "router_argv",
]


def register(registry: Registry) -> None:
    """Fill the option registry (:mod:`pytest_sskj.registry`) with what this module owns: ``--engine``'s choices, the
    default engine and the engine of a name."""
    registry.set_choices("engine", ENGINE_NAMES)
    registry.set_engines(DEFAULT_ENGINE, get_engine)
