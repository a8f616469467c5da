"""Hooks of the deployment features: the ``sskj_recommendation`` parameter and its place in the run order.

``acceptance/test_recommendation.py`` asks for ``sskj_recommendation`` (one
:class:`~pytest_sskj.deploy.measure.RecommendKey` per shape x backend x chunk of a run with ``--layout``);
those tests run after every other acceptance test, so the points they rank are measured already, and get a
pytest-timeout ``signal`` marker sized to their layouts.
"""

from __future__ import annotations

import signal

import pytest

from pytest_sskj.deploy.measure import RecommendKey, recommend_keys
from pytest_sskj.stash import SETTINGS_KEY

__all__ = ["RecommendKey"]

_PER_POINT_S = {"embedded": 60.0}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    settings = metafunc.config.stash.get(SETTINGS_KEY, None)
    if settings is None or "sskj_recommendation" not in metafunc.fixturenames:
        return
    keys: list[RecommendKey | None] = list(recommend_keys(settings)) or [None]
    metafunc.parametrize("sskj_recommendation", keys, ids=[k.id if k else "no-layouts" for k in keys])


def _is_recommendation(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "sskj_recommendation" in callspec.params


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    recs = [it for it in items if _is_recommendation(it)]
    if not recs:
        return
    items[:] = [it for it in items if not _is_recommendation(it)] + recs
    if not (config.pluginmanager.hasplugin("timeout") and hasattr(signal, "SIGALRM")):
        return
    per_point = _PER_POINT_S.get(settings.engine, 900.0)
    steps = 16 if settings.search != "none" else 0
    budget = len(settings.layouts) * (
        settings.health_timeout_s + per_point * (settings.repeats * (len(settings.concurrencies) + 1) + steps)
    )
    for it in recs:
        if it.get_closest_marker("timeout") is None and config.getoption("timeout", None) is None:
            it.add_marker(pytest.mark.timeout(budget, method="signal"))
