"""A topology made concrete: each group's server spec and per-node commands, the router's command, the plan.

:func:`group_spec` turns a :class:`~pytest_sskj.deploy.topology.Group` into a
:class:`~pytest_sskj.server.spec.ServerSpec` over the group's own nodes, with the run's server args and
env, the engine's PD flags for its role (transfer backend, bootstrap port, IB devices, the shared page
size) and the group's own args; :func:`router_command` is the router process fronting the groups' rank-0
URLs.  Launch order: prefill groups, decode groups (each until its rank 0 is healthy), then the router.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest

from pytest_sskj.deploy.topology import Group, Topology
from pytest_sskj.engines import get_engine, node_commands, router_argv
from pytest_sskj.nodes import node_url
from pytest_sskj.server.spec import NodeCommand, ServerSpec, spec_from_settings
from pytest_sskj.settings import Settings

__all__ = ["deployment_plan_lines", "group_spec", "launch_order", "router_command"]


def launch_order(topo: Topology) -> list[Group]:
    """Prefill groups first (they own the bootstrap port), then decode groups, then plain groups."""
    rank = {"prefill": 0, "decode": 1, "serve": 2}
    return sorted(topo.groups, key=lambda g: rank[g.role])


def _engine_backend(engine: str) -> str:
    """A group without a backend runs the engine's own default (``auto``; the first one it knows otherwise)."""
    known = get_engine(engine).backends
    return "auto" if "auto" in known else known[0]


def group_spec(settings: Settings, topo: Topology, group: Group) -> ServerSpec:
    """The server spec of ``group``: its nodes, sizes, backend and chunk, PD flags, the run's args and env."""
    s = settings
    pd = get_engine(s.engine).disaggregation_args(
        group.role,
        transfer_backend=topo.transfer_backend,
        bootstrap_port=topo.bootstrap_port,
        ib_device=topo.ib_device,
        page_size=topo.page_size,
    )
    return spec_from_settings(
        s,
        backend=group.backend or _engine_backend(s.engine),
        chunk=group.chunk,
        override=group.override(pd),
    )


def _url(node: str, port: int) -> str:
    return node_url(node, port)


def router_command(settings: Settings, topo: Topology, urls: dict[str, Sequence[str]] | None = None) -> NodeCommand:
    """The router's command; ``urls`` maps a group name to its serving URLs (default: node 0 / every replica)."""
    if topo.router is None:
        raise ValueError("this deployment has no router")
    r = topo.router

    def group_urls(g: Group) -> list[str]:
        if urls is not None and g.name in urls:
            return list(urls[g.name])
        cmds = node_commands(group_spec(settings, topo, g))
        return [_url(c.node, c.port) for c in cmds if c.serves_http]

    python = settings.router_python or settings.python or sys.executable
    if topo.kind == "pd":
        boot = topo.bootstrap_port
        argv = router_argv(
            python,
            prefill=[(u, boot) for g in topo.role("prefill") for u in group_urls(g)],
            decode=[u for g in topo.role("decode") for u in group_urls(g)],
            host=r.host,
            port=r.port,
            policy=r.policy,
            extra=r.server_args,
        )
    else:
        argv = router_argv(
            python,
            workers=[u for g in topo.groups for u in group_urls(g)],
            host=r.host,
            port=r.port,
            policy=r.policy,
            extra=r.server_args,
        )
    return NodeCommand(r.node, 0, argv, (), True, r.port)


def deployment_plan_lines(config: pytest.Config, settings: Settings) -> list[str]:
    """The dry run of a deployment: its topology, every group's per-node commands in launch order, the router."""
    topo = settings.deployment
    assert topo is not None
    lines = [
        "deployment (launch order: prefill groups, decode groups, then the router; the client talks to the router):"
    ]
    lines += [f"  {line}" for line in topo.describe()]
    for g in launch_order(topo):
        spec = group_spec(settings, topo, g)
        cmds = config.hook.pytest_sskj_server_commands(config=config, spec=spec) or node_commands(spec)
        lines.append(f"  [group {g.name} ({g.role})]  key {spec.key()}")
        for cmd in cmds:
            role = (
                "rank 0, serves HTTP"
                if cmd.rank == 0 and cmd.serves_http
                else ("replica" if cmd.serves_http else f"rank {cmd.rank}")
            )
            lines.append(f"    {cmd.node} ({role}): {cmd.shell()}")
    if topo.router is not None:
        rc = router_command(settings, topo)
        lines.append(f"  [router]  {rc.node}: {rc.shell()}")
    return lines
