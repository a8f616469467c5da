"""Chunk curves: per backend and concurrency, input throughput and TTFT across chunked-prefill sizes.

Names the best chunk (the users found 8K beats 4K and 16K); with ``--expect-best-chunk`` it is a verdict.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.matrix import CurveKey
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import EXPECTATION


def test_chunk_curve(
    sskj_curve: CurveKey, sskj_acceptance: Acceptance, sskj_site: SiteDefaults, request: pytest.FixtureRequest
) -> None:
    key = sskj_curve
    if len(key.chunks) < 2:
        pytest.skip(
            f"a chunk curve needs at least two chunk sizes, this run has {key.chunks[0]}: "
            f"give several with --chunk, e.g. --chunk 4K,8K,16K"
        )
    target = sskj_acceptance.settings.target_url
    if target:
        pytest.skip(
            f"--target-url {target} is one running server with one chunk size; drop --target-url to launch each"
        )
    sskj_acceptance.label(sskj_site, story="chunk curve", backend=key.backend, C=key.concurrency)
    curve = sskj_acceptance.curve(key, request.node.nodeid)
    assert curve.best is not None, f"no chunk of {key.id} has a passed repeat: see the test_serving failures"
    print(curve.describe())
    if curve.expected_best is not None:
        assert curve.passed, f"{EXPECTATION} {curve.describe()}"
