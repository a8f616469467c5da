"""The max-context-length probe (``--sskj-max-context LO:HI``; docs/max-context.md): each backend's server is asked
for the largest input length it accepts and serves within the SLO's TTFT bound, found by bisection between the
stated bounds (its advertised limit probed first).  ``test_max_context`` reports it with every probe's outcome
(accepted, over_slo, rejected with the server's own message, oom, timeout) and fails when not even LO is served.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.context import ContextKey
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import CRASH, EXPECTATION, OOM, SLO, TIMEOUT


def test_max_context(
    sskj_max_context: ContextKey, sskj_acceptance: Acceptance, sskj_site: SiteDefaults, request: pytest.FixtureRequest
) -> None:
    from pytest_sskj.report import allure

    key = sskj_max_context
    sskj_acceptance.label(sskj_site, backend=key.backend, layout=key.layout)
    v = sskj_acceptance.max_context(key, request.node.nodeid)
    allure.metric_parameters(max_context_tokens=v.get("largest_isl"), probes=len(v.get("probes") or []))
    allure.attach_json(f"max_context {v['id']}", v)
    print(v["message"])
    if v["passed"] is None:
        pytest.fail(f"{CRASH} {v['message']}", pytrace=False)
    floor = (v.get("probes") or [{}])[0].get("outcome")  # not even LO served: what came of it
    tag = {"oom": OOM, "timeout": TIMEOUT, "over_slo": SLO}.get(str(floor), EXPECTATION)
    assert v["passed"], f"{tag} {v['message']}"
