"""The recommendation: per shape, backend and chunk, the layout x concurrency that meets the SLO with the highest
throughput.

Every layout's best point (every repeat passed, none client-bound, every repeat within the SLO) is ranked by
``--sskj-recommend-metric``; the ranked table lands in ``summary.md`` and ``recommendation/<id>.csv|.json``,
the plot (throughput vs C per layout, SLO misses marked) in ``plots/``.  A lead is conclusive only when the
winner's slowest repeat beats the runner-up's fastest; ``--sskj-expect-layout`` asserts a conclusive winner and
``--sskj-throughput-floor`` a minimum throughput.  Without an expectation the test fails only when no layout
meets the SLO.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.deploy.measure import RecommendKey, measure_recommendation, write_outputs
from pytest_sskj.report import allure
from pytest_sskj.report.categories import EXPECTATION, SLO


def test_recommendation(
    sskj_recommendation: RecommendKey | None,
    sskj_acceptance: Acceptance,
    sskj_site: SiteDefaults,
    request: pytest.FixtureRequest,
) -> None:
    settings = sskj_acceptance.settings
    if sskj_recommendation is None:
        pytest.skip("no layouts to compare: give them with --layout tp2dp4,tp4dp2,tp8dp1 or a profile's [[layouts]]")
    if settings.target_url:
        pytest.skip(f"--target-url {settings.target_url} is one running server: layouts cannot be compared")
    key = sskj_recommendation
    sskj_acceptance.label(sskj_site, story="layout recommendation", shape=key.id, backend=key.backend)
    rec, steps = measure_recommendation(sskj_acceptance, key)
    paths = write_outputs(settings.run_dir, rec, steps)
    verdict = rec.as_dict()
    if paths["plot"] is not None:
        verdict["section"]["plot"] = str(paths["plot"].relative_to(settings.run_dir))
        allure.attach_file(paths["plot"])
    sskj_acceptance.record(
        {
            "kind": "recommendation",
            "id": key.id,
            "test_id": request.node.nodeid,
            "isl": key.shape[0],
            "osl": key.shape[1],
            "backend": key.backend,
            "chunk": key.chunk,
            "platform": settings.platform,
            "model": settings.model_name,
            "engine": settings.engine,
            "files": {k: str(v) for k, v in paths.items() if v is not None},
            **verdict,
        }
    )
    print(rec.message())
    if rec.winner is None:
        pytest.fail(f"{SLO} {rec.message()}", pytrace=False)
    assert rec.passed, f"{EXPECTATION} {rec.message()}"
