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
from pytest_sskj.deploy.pool import DeploymentPool
from pytest_sskj.deploy.topology import Group
from pytest_sskj.stash import SETTINGS_KEY

__all__ = ["RecommendKey", "get_deployment_pool"]


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
    from pytest_sskj.acceptance.budget import cells, point_budget_s

    per_point = max(point_budget_s(settings, i, o, c) for i, o, c in cells(settings))  # its longest shape's
    steps = 16 if settings.search != "none" else 0
    budget = len(settings.layouts) * (
        settings.health_timeout_s + per_point * (settings.repeats * (len(settings.concurrencies) + 1) + steps)
    )
    for it in recs:
        if it.get_closest_marker("timeout") is None and config.getoption("timeout", None) is None:
            it.add_marker(pytest.mark.timeout(budget, method="signal"))


_DEPLOYMENT_POOL = "deployment_pool"


def get_deployment_pool(config: pytest.Config) -> DeploymentPool:
    """This session's :class:`DeploymentPool` (created on first use; closed at session end)."""
    from pytest_sskj.stash import EXTRA_KEY

    extra = config.stash[EXTRA_KEY]
    pool = extra.get(_DEPLOYMENT_POOL)
    if isinstance(pool, DeploymentPool):
        return pool
    from pytest_sskj.gpu.serving import server_prelaunch
    from pytest_sskj.server.fixtures import _launcher_factory, _worker_tag
    from pytest_sskj.server.local import LocalLauncher
    from pytest_sskj.server.pool import ServerPool

    settings = config.stash[SETTINGS_KEY]
    topo = settings.deployment
    assert topo is not None
    tag = _worker_tag(config)

    def make_pool(group: Group) -> ServerPool:
        return ServerPool(
            log_dir=settings.run_dir / "logs",
            launcher=_launcher_factory(settings, f"{group.name}{tag}"),
            health_timeout_s=settings.health_timeout_s,
            model_cache_dir=settings.reports_dir / ".cache" / "models",
            commands_for=lambda spec: config.hook.pytest_sskj_server_commands(config=config, spec=spec),
            name_tag=f"{group.name}{tag}",
            prelaunch=server_prelaunch(config),
        )

    from pytest_sskj.nodes import is_local_node

    local = topo.router is None or is_local_node(topo.router.node)
    router_launcher = LocalLauncher() if local else _launcher_factory(settings, f"router{tag}")()
    pool = DeploymentPool(
        settings, make_pool=make_pool, router_launcher=router_launcher, log_dir=settings.run_dir / "logs"
    )
    extra[_DEPLOYMENT_POOL] = pool

    def close() -> None:
        pool.close()

    config.add_cleanup(close)
    return pool
