"""Serving engines as units: the declared interface (:mod:`.base`), the registry, one module per engine.

Callers use :func:`get_engine` (and :func:`node_commands`); only :mod:`.registry` imports engine modules.
"""

from __future__ import annotations

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
