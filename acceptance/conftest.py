"""Site defaults of the acceptance suite (edit here, not in the tests).

The suite itself comes from the ``pytest_sskj.acceptance`` plugin: test parameters, run order, verdicts
and the terminal summary.  A site adjusts the report labels below, and may implement pytest-sskj hooks
here, e.g. ``pytest_sskj_server_commands`` to wrap every rank's command in its container runner.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.plugin import SiteDefaults


@pytest.fixture(scope="session")
def sskj_site() -> SiteDefaults:
    """Allure feature and story of this site's serving acceptance (the epic is ``<model> <platform>``)."""
    return SiteDefaults(feature="MoE backend", story="prefill throughput")


def pytest_configure(config: pytest.Config) -> None:
    """The suite's fixtures (``sskj_point``, ...) come from the pytest-sskj plugin: say so when it is off."""
    if not (config.pluginmanager.has_plugin("sskj") or config.pluginmanager.has_plugin("pytest_sskj.plugin")):
        raise pytest.UsageError(
            "the acceptance suite needs the pytest-sskj plugin, which is disabled (-p no:sskj)\n"
            "  accepted: pytest acceptance/ with the plugin enabled (installed: pip install -e .)\n"
            "  Hint: drop -p no:sskj; to run only the self-tests without it, use pytest unit/"
        )
