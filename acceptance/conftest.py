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
