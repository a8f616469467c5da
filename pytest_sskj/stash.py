"""Every ``config.stash`` key of pytest-sskj, declared once (no module-level mutable state elsewhere)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # types only: the stash sits below the subsystems whose objects it holds
    from pytest_sskj.report.manifest import RunManifest
    from pytest_sskj.settings import Settings

__all__ = ["EXTRA_KEY", "MANIFEST_KEY", "NOT_APPLICABLE_KEY", "RECORDED_KEY", "SETTINGS_KEY"]

SETTINGS_KEY: pytest.StashKey[Settings] = pytest.StashKey()
"""The frozen, resolved settings of this session."""

MANIFEST_KEY: pytest.StashKey[RunManifest] = pytest.StashKey()
"""The run manifest (``<run dir>/manifest.json``), written at session start and completed at the end."""

EXTRA_KEY = pytest.StashKey[dict[str, Any]]()
"""Per-session objects of the subsystems (server pool, GPU allocator, reporters), keyed by subsystem name."""

NOT_APPLICABLE_KEY = pytest.StashKey[dict[str, str]]()
"""Tests the plugin itself deselected because they do not apply to this run's configuration (node id -> reason,
e.g. the baseline gate without ``--sskj-baseline``): not a user's selection, so a release lists them instead of
refusing the run as not run in full."""

RECORDED_KEY = pytest.StashKey[bool]()
"""Whether this session records a run (run directory, results database, header): :mod:`pytest_sskj.recording`."""
