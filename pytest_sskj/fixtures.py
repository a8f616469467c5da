"""Session-level fixtures shared by every subsystem: resolved settings and the run directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY

__all__ = ["run_dir", "sskj_settings"]


@pytest.fixture(scope="session")
def sskj_settings(pytestconfig: pytest.Config) -> Settings:
    """The frozen, resolved pytest-sskj settings of this session."""
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def run_dir(sskj_settings: Settings) -> Path:
    """``<reports dir>/<run id>``: where this run's results, logs and manifest go."""
    d = sskj_settings.run_dir
    d.mkdir(parents=True, exist_ok=True)
    return d
