"""Adaptive concurrency search: the highest concurrency that meets the SLO, per backend and chunk.

``--sskj-search double`` doubles C from 1 until the SLO fails or throughput saturates; ``add16`` steps
from C=16 in +16 with an SLO stop and a step back.  Steps land in ``<run dir>/search/`` as they are
measured and ``--resume <run id>`` continues an interrupted search.  ``--sskj-search-floor`` asserts a
minimum.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import SLO


def test_concurrency_search(
    sskj_search_config: tuple[str, int | None],
    sskj_acceptance: Acceptance,
    sskj_site: SiteDefaults,
    request: pytest.FixtureRequest,
) -> None:
    settings = sskj_acceptance.settings
    if settings.search == "none":
        pytest.skip(
            "adaptive concurrency search is off: enable it with --sskj-search double|add16 "
            "(and a floor with --sskj-search-floor N)"
        )
    backend, chunk = sskj_search_config
    sskj_acceptance.label(sskj_site, story="concurrency search", backend=backend, chunk=chunk, mode=settings.search)
    result = sskj_acceptance.search(backend, chunk, request.node.nodeid, item=request.node)
    print(result.message())
    assert result.passed, f"{SLO} {backend} chunk {chunk}: {result.message()}"
