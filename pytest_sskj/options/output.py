"""The rows of GPU leasing (``gpu/``), the run's output folder (``report/``) and the results history
(``history/``).
"""

from __future__ import annotations

from pytest_sskj.options.row import DAY_S, Option

__all__ = ["GPUS", "HISTORY", "OUTPUT"]

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
