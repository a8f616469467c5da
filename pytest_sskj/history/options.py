"""The option rows the history subsystem owns: the results database, the baseline, the regression margin and
the dry run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_sskj.options.row import Option

if TYPE_CHECKING:
    from pytest_sskj.registry import Registry

__all__ = ["HISTORY", "register"]

HISTORY: tuple[Option, ...] = (
    # --- results history ------------------------------------------------------------------------
    Option(
        "db",
        ("--sskj-db",),
        "db",
        "Results database every point, verdict and run is also written to: a SQLAlchemy URL "
        "(postgresql://user:pass@host/db, sqlite:///path) or a file path (default: <reports dir>/results.sqlite; "
        "'none' disables); the password never reaches a report",
        metavar="URL",
    ),
    Option(
        "baseline_ref",
        ("--sskj-baseline",),
        "ref",
        "Judge every point against this earlier run's matching point: a release tag, a run id or last-release "
        "(a regression beyond the baseline's repeat spread plus --sskj-regression-margin fails)",
        metavar="REF",
    ),
    Option(
        "regression_margin_pct",
        ("--sskj-regression-margin",),
        "float",
        "Percent a point may be worse than its baseline on top of the baseline's own repeat spread (default 5)",
        default=5.0,
        lo=0,
        hi=1000,
        unit="%",
    ),
    Option(
        "dry_run",
        ("--sskj-dry-run",),
        "bool",
        "Print the test matrix and every node's command; launch nothing",
        default=False,
    ),
)
"""The results database, the baseline and the dry run."""


def register(registry: Registry) -> None:
    """Add this subsystem's option rows to the option registry (as a pytest plugin's ``pytest_addoption``)."""
    registry.add_options(*HISTORY)
