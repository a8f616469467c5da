"""Serving acceptance: every point and repeat serves N/N requests correctly on a healthy, unchanged server.

``test_serving[<backend>-chunk<c>-c<C>-r<r>]`` passes when all requests pass the strict oracle (exact
output lengths, no errors), the log oracle found no fatal signature on any node during the point, the
server is still alive and still reports the spec'd configuration.  After a crash the remaining points of
that server are reported "not run: server crashed at <point>" (skipped) instead of hanging.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.matrix import Point
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report import allure
from pytest_sskj.vocabulary import COMPARISON_METRICS


def test_serving(
    sskj_point: Point, sskj_acceptance: Acceptance, sskj_site: SiteDefaults, request: pytest.FixtureRequest
) -> None:
    p = sskj_point
    sskj_acceptance.label(
        sskj_site, backend=p.backend, chunk=p.chunk, C=p.concurrency, repeat=f"{p.repeat}/{p.repeats}"
    )
    out = sskj_acceptance.serve(p, request.node)
    row = out.row
    if out.status == "not_run":
        pytest.skip(out.message)
    allure.metric_parameters(**{m: row.get(m) for m in (*COMPARISON_METRICS, "p95_tpot_ms")})
    assert out.passed, out.message
    n = row["requests"]
    assert row.get("completed") == n and not row.get("failed"), (
        f"expected {n}/{n} requests to pass the strict oracle, saw completed={row.get('completed')} "
        f"failed={row.get('failed')}"
    )
    fatal = [f for f in row["findings"] if f.get("severity") == "fatal"]
    assert not fatal, f"expected no fatal log finding during {p.id}, saw {fatal}"
