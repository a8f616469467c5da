"""The subsystems that fill the option registry, in order (the entry layer's wiring, like pytest's list of its
built-in plugins).

Each listed module has a ``register(registry)`` function that adds what it owns to a
:class:`~pytest_sskj.registry.Registry` (its option rows, a value parser, the engines, the profile loader,
derived dimensions, cross-setting checks).  Rows and checks keep the order their subsystems are listed in: the
rows' order is the resolution and ``--help`` order; the engine and layout combination checks run before the
generic ones, as a user's first error is the most specific one.  This is the one place where the foundation
meets the layers above it; :mod:`pytest_sskj.settings` imports none of them.
"""

from __future__ import annotations

from pytest_sskj import combination, engines, profile, slo, validate
from pytest_sskj.acceptance import agreement, budget, context
from pytest_sskj.acceptance import options as acceptance_options
from pytest_sskj.accuracy import options as accuracy_options
from pytest_sskj.deploy import layouts
from pytest_sskj.deploy import options as deploy_options
from pytest_sskj.gpu import options as gpu_options
from pytest_sskj.history import options as history_options
from pytest_sskj.options import Option
from pytest_sskj.registry import Registry
from pytest_sskj.report import options as report_options
from pytest_sskj.server import options as server_options
from pytest_sskj.server import speculative

__all__ = ["OPTIONS", "SUBSYSTEMS", "build_registry"]

SUBSYSTEMS = (
    server_options,
    speculative,
    deploy_options,
    acceptance_options,
    accuracy_options,
    context,
    gpu_options,
    report_options,
    history_options,
    engines,
    slo,
    agreement,
    layouts,
    profile,
    combination,
    budget,  # the plan's time bound: after the engine and layout checks, before the reports dir is made
    validate,
)
"""The modules whose ``register`` fills the registry, in order: the option rows first (their order is the
resolution and ``--help`` order), then what the rows' values need."""


def build_registry() -> Registry:
    """A registry filled by every subsystem of :data:`SUBSYSTEMS`."""
    registry = Registry()
    for module in SUBSYSTEMS:
        module.register(registry)
    return registry


OPTIONS: tuple[Option, ...] = build_registry().options
"""The whole option table, every subsystem's rows (``--engine``'s choices filled in)."""
