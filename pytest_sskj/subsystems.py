"""The subsystems that fill the option registry, in order (the entry layer's wiring, like pytest's list of its
built-in plugins).

Each listed module has a ``register(registry)`` function that adds what it owns to a
:class:`~pytest_sskj.registry.Registry` (a value parser, the engines, the profile loader, derived dimensions,
cross-setting checks).  Checks run in the order their subsystems are listed here: the engine and layout
combination before the generic checks, as a user's first error is the most specific one.  This is the one
place where the foundation meets the layers above it; :mod:`pytest_sskj.settings` imports none of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pytest_sskj import combination, engines, profile, slo, validate
from pytest_sskj.acceptance import agreement
from pytest_sskj.deploy import layouts
from pytest_sskj.options import OPTIONS
from pytest_sskj.registry import Registry

if TYPE_CHECKING:
    from pytest_sskj.options import Option

__all__ = ["SUBSYSTEMS", "build_registry"]

SUBSYSTEMS = (engines, slo, agreement, layouts, profile, combination, validate)
"""The modules whose ``register`` fills the registry, in order."""


def build_registry(options: Sequence[Option] = OPTIONS) -> Registry:
    """A registry of ``options`` filled by every subsystem of :data:`SUBSYSTEMS`."""
    registry = Registry(options)
    for module in SUBSYSTEMS:
        module.register(registry)
    return registry
