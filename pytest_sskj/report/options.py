"""The option rows the report subsystem owns: the reports folder and the run id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["OUTPUT", "register"]

OUTPUT: tuple[Option, ...] = (
    # --- output ---------------------------------------------------------------------------------
    Option(
        "reports_dir",
        ("--reports-dir",),
        "path",
        "Root of generated output (default reports/)",
        default="reports",
    ),
    Option("run_id", ("--run-id",), "run_id", "Run id, the folder under --reports-dir (default: time stamp)"),
)
"""The reports folder and the run id."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``)."""
    registry.add_options(*OUTPUT)
