"""``serve start`` of a profile's ``[deployment]``: every group's servers and the router, left running.

The same :class:`~pytest_sskj.deploy.pool.DeploymentPool` a PD run uses starts the topology (prefill groups,
decode groups, plain groups, each healthy and checked against its spec, the PD contract between them, then
the real router until its ``/health`` is 200), with serve's launchers (no reaper watchdog: the ranks outlive
this process) and the identity pre-launch per group (a mixed build on a group's nodes is refused).  The state
lists every group's ranks and the router (``RankState.group``), the client URL is the router's (or every
group's URL when the topology has no router), and the topology's label is recorded so that a run naming the
deployment (``--sskj-deployment``) can be held to the same topology.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sskj.deploy.pool import RunningDeployment
    from pytest_sskj.deploy.topology import Group
    from pytest_sskj.serve.state import DeploymentState, RankState
    from pytest_sskj.server.launcher import Launcher
    from pytest_sskj.server.pool import ServerPool
    from pytest_sskj.settings import Settings

__all__ = ["deployment_ranks", "deployment_state", "start_deployment"]


def _router_launcher(settings: Settings, name: str) -> Launcher:
    """The router runs as a plain process (never in the groups' container) on its node."""
    from pytest_sskj.nodes import is_local_node
    from pytest_sskj.server.launcher import launcher_class
    from pytest_sskj.server.local import LocalLauncher

    topo = settings.deployment
    assert topo is not None and topo.router is not None
    if is_local_node(topo.router.node):
        return LocalLauncher(detached_pump=True)
    return launcher_class("ssh").from_settings(settings, worker=f"serve-{name}-router")


def start_deployment(
    settings: Settings,
    name: str,
    log_dir: Path,
    *,
    pool_for: Callable[[str, Callable[[Any, Sequence[Any]], object]], ServerPool],
    say: Callable[[str], None],
) -> tuple[RunningDeployment, dict[str, Any], Callable[[], object]]:
    """Start the topology; return it, the nodes' identity by group, and a callable that stops it all.
    ``pool_for(tag, record)``: serve's server pool of one group (``record`` gets its nodes' identities)."""
    from pytest_sskj.deploy.pool import DeploymentPool
    from pytest_sskj.identity import build_facts
    from pytest_sskj.server.spec import spec_from_settings

    topo = settings.deployment
    assert topo is not None
    identity: dict[str, Any] = {"groups": {}}

    def make_pool(group: Group) -> ServerPool:
        def record(_spec: Any, ids: Sequence[Any]) -> None:
            identity["groups"][group.name] = {"nodes": [i.as_dict() for i in ids], **build_facts(ids)}

        return pool_for(f"{name}-{group.name}", record)

    from pytest_sskj.server.local import LocalLauncher

    router = _router_launcher(settings, name) if topo.router is not None else LocalLauncher()
    pool = DeploymentPool(settings, make_pool=make_pool, router_launcher=router, log_dir=log_dir / "logs")
    say(f"deployment {name}: {topo.label()}")
    try:
        dep = pool.get(spec_from_settings(settings, backend=settings.baseline, chunk=None))
    except BaseException:
        pool.close()
        raise
    return dep, identity, pool.close


def deployment_ranks(dep: RunningDeployment, rank_state: Callable[..., RankState]) -> tuple[RankState, ...]:
    """Every group's ranks (``group`` = the group's name) and the router (``group`` = ``router``)."""
    out: list[RankState] = []
    for gname, server in dep.groups.items():
        serves = {(c.node, c.rank) for c in server.commands if c.serves_http}
        out += [rank_state(h, serves, gname) for h in server.handles]
    if dep.router is not None:
        out.append(rank_state(dep.router, {(dep.router.node, dep.router.rank)}, "router"))
    return tuple(out)


def deployment_state(
    name: str, settings: Settings, dep: RunningDeployment, identity: dict[str, Any], log_dir: Path,
    ranks: tuple[RankState, ...], common: dict[str, Any],
) -> DeploymentState:  # fmt: skip
    from pytest_sskj.serve.state import DeploymentState, recorded_spec

    topo = dep.topology
    groups = {g: {"spec": recorded_spec(s.spec), "urls": list(s.urls)} for g, s in dep.groups.items()}
    return DeploymentState(
        name=name,
        engine=settings.engine,
        label=topo.label(),
        urls=tuple(dep.urls),
        ranks=ranks,
        spec={"topology": topo.as_dict(), "groups": groups},
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        launcher=settings.launcher,
        health_path="/health",  # the router's (SGLang's router and every group serve it)
        identity=identity,
        log_dir=str(log_dir),
        startup_s=round(dep.startup_s, 3) if dep.startup_s is not None else None,
        notes=tuple(dep.notes),
        topology=topo.label(),
        **common,
    )
