"""SLO gates per serving configuration: TTFT P95 < 3 s and TPOT P95 < 50 ms, strictly (``--sskj-slo``).

Gate names are the canonical metric names of results.csv (``p95_ttft_ms``).

Every passed repeat of the configuration must meet every gate.  A gate on a metric that is undefined for
the run (TPOT when OSL = 1) is reported "not judged", never passed on a 0.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.matrix import ConfigKey
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import SLO


def test_slo(
    sskj_slo_config: ConfigKey, sskj_acceptance: Acceptance, sskj_site: SiteDefaults, request: pytest.FixtureRequest
) -> None:
    key = sskj_slo_config
    settings = sskj_acceptance.settings
    sskj_acceptance.label(sskj_site, story="SLO", backend=key.backend, chunk=key.chunk, C=key.concurrency)
    if not settings.slo:
        pytest.skip("no SLO gates configured; set them with --sskj-slo 'p95_ttft_ms<3000,p95_tpot_ms<50'")
    ok, message, _ = sskj_acceptance.slo(key, request.node.nodeid)
    if ok is None:
        pytest.skip(f"not judged: no repeat of {key.id} passed test_serving ({message})")
    gates = ", ".join(map(str, settings.slo))
    assert ok, f"{SLO} {key.id} misses the SLO ({gates}): {message}"
