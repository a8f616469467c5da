"""Deployment topologies: named server groups over their own nodes, plus an optional router.

A *group* is one server spec over its own nodes (``ranks``: one multi-node server; ``replicas``: one server
per node) with a role: ``serve`` (an ordinary server), ``prefill`` or ``decode`` (PD disaggregation).  A
PD topology has at least one prefill and one decode group, a KV transfer backend (Mooncake or NIXL), the
prefill side's bootstrap port, optional IB devices and one page size for both sides; the router fronts
them and the client talks to the router only.  Declared in a profile's ``[deployment]`` table::

    [deployment]
    kind = "pd"
    transfer_backend = "mooncake"
    page_size = 64
    [[deployment.groups]]
    name = "prefill"
    role = "prefill"
    nodes = "601-604"
    pp = 8
    tp = 4
    ep = 4
    backend = "flashinfer_mxfp4"
    chunk = "8K"
    [deployment.router]
    port = 8000

Pure data, parsing and checks; the engine module turns a group into per-node commands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_sskj import parsing
from pytest_sskj.spec import SpecOverride

__all__ = [
    "GROUP_KEYS",
    "ROLES",
    "ROUTER_KEYS",
    "TOPOLOGY_KEYS",
    "Group",
    "RouterSpec",
    "Topology",
    "bind_run",
    "topology_from_table",
]

ROLES = ("serve", "prefill", "decode")
GROUP_KEYS = ("backend", "chunk", "dp", "env", "ep", "name", "nodes", "placement", "pp", "role", "server_args", "tp")
ROUTER_KEYS = ("host", "node", "policy", "port", "server_args")
TOPOLOGY_KEYS = ("bootstrap_port", "groups", "ib_device", "kind", "page_size", "router", "transfer_backend")
_KINDS = ("pd", "groups")


@dataclass(frozen=True)
class Group:
    """One server group: a role, its nodes (rank 0 first), parallel sizes, backend, chunk, args, env."""

    name: str
    role: str
    nodes: tuple[str, ...]
    tp: int = 1
    dp: int = 1
    ep: int = 1
    pp: int = 1
    backend: str | None = None
    chunk: int | None = None
    placement: str = "ranks"
    server_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    @property
    def sizes(self) -> str:
        return f"PP{self.pp} x TP{self.tp} x EP{self.ep}" + (f" x DP{self.dp}" if self.dp > 1 else "")

    def override(self, role_args: Sequence[str] = ()) -> SpecOverride:
        """What this group changes of the run's server spec: its nodes, sizes and placement, ``role_args`` (the
        engine's disaggregation flags) then its own args, its env, labelled with its name and role (the one
        narrowing of a group, for the spec builder and the settings checks alike)."""
        return SpecOverride(nodes=self.nodes, tp=self.tp, ep=self.ep, dp=self.dp, pp=self.pp,
                            placement=self.placement, server_args=(*role_args, *self.server_args), env=self.env,
                            labels=(("group", self.name), ("role", self.role)))  # fmt: skip

    def describe(self) -> str:
        chunk = f", chunk {self.chunk}" if self.chunk else ""
        return (
            f"group {self.name} ({self.role}): nodes {','.join(self.nodes)} ({self.placement}), {self.sizes}, "
            f"backend {self.backend or 'engine default'}{chunk}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "nodes": list(self.nodes),
            "tp": self.tp,
            "dp": self.dp,
            "ep": self.ep,
            "pp": self.pp,
            "backend": self.backend,
            "chunk": self.chunk,
            "placement": self.placement,
            "server_args": list(self.server_args),
            "env": sorted(k for k, _ in self.env),
        }


@dataclass(frozen=True)
class RouterSpec:
    """The router process: where it runs (``local``: the client machine), its port and policy."""

    port: int = 8000
    host: str = "0.0.0.0"  # noqa: S104 - the client may run elsewhere
    node: str = "local"
    policy: str | None = None
    server_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """A deployment: groups and an optional router; ``kind`` ``pd`` (prefill/decode) or ``groups``."""

    kind: str
    groups: tuple[Group, ...]
    router: RouterSpec | None = None
    transfer_backend: str | None = None
    bootstrap_port: int | None = None
    ib_device: str | None = None
    page_size: int | None = None
    notes: tuple[str, ...] = field(default=())

    @property
    def arm(self) -> str:
        """The one arm of a deployment run's matrix (``pd`` / ``groups``): the deployment is fixed, so its
        points differ in shape and concurrency only, and no backend A/B runs across it."""
        return self.kind

    def role(self, role: str) -> tuple[Group, ...]:
        return tuple(g for g in self.groups if g.role == role)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for g in self.groups for n in g.nodes)

    def describe(self) -> list[str]:
        head = f"{self.kind} deployment: {len(self.groups)} group(s)"
        if self.kind == "pd":
            head += (
                f", transfer backend {self.transfer_backend or 'engine default'}, "
                f"bootstrap port {self.bootstrap_port or 'engine default'}, page size {self.page_size or 'default'}"
                + (f", IB devices {self.ib_device}" if self.ib_device else "")
            )
        lines = [head, *(g.describe() for g in self.groups)]
        if self.router is not None:
            lines.append(
                f"router on {self.router.node}, port {self.router.port}, policy {self.router.policy or 'default'}"
            )
        return lines

    def label(self) -> str:
        """One line for result rows: ``pd: prefill 601-604 PP8 x TP4 x EP4 flashinfer_mxfp4 | decode ... | router``."""
        parts = [f"{g.name} {g.nodes[0]}..{g.nodes[-1]} {g.sizes} {g.backend or ''}".strip() for g in self.groups]
        if self.router is not None:
            parts.append(f"router {self.router.node}")
        return f"{self.kind}: " + " | ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """The topology for results and manifests (names only for env)."""
        return {
            "kind": self.kind,
            "groups": [g.as_dict() for g in self.groups],
            "router": None
            if self.router is None
            else {"node": self.router.node, "port": self.router.port, "policy": self.router.policy},
            "transfer_backend": self.transfer_backend,
            "bootstrap_port": self.bootstrap_port,
            "ib_device": self.ib_device,
            "page_size": self.page_size,
        }


def _refuse(raw: Mapping[str, Any], accepted: Sequence[str], where: str) -> None:
    unknown = sorted(k for k in raw if k not in accepted)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(accepted)}")


def _int(raw: Mapping[str, Any], key: str, where: str, default: int | None = 1) -> int | None:
    v = raw.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{where}: {key} must be a whole number, not {v!r}")
    return parsing.parse_size(str(v)) if isinstance(v, str) else parsing.parse_int(str(v))


def _group(raw: Mapping[str, Any], where: str, template: str = "{}") -> Group:
    _refuse(raw, GROUP_KEYS, where)
    name = str(raw.get("name") or "").strip()
    if not name:
        raise ValueError(f"{where}: every group needs a name")
    role = str(raw.get("role", "serve"))
    if role not in ROLES:
        raise ValueError(f"{where}: group {name!r} role {role!r} is not one of {', '.join(ROLES)}")
    if "nodes" not in raw:
        raise ValueError(f'{where}: group {name!r} needs nodes, e.g. nodes = "601-604"')
    placement = str(raw.get("placement", "ranks"))
    if placement not in ("ranks", "replicas"):
        raise ValueError(f"{where}: group {name!r} placement must be ranks or replicas")
    args, env = raw.get("server_args", []), raw.get("env", {})
    if not isinstance(args, list) or not isinstance(env, dict):
        raise ValueError(f"{where}: group {name!r}: server_args is a list of strings, env a table")
    return Group(
        name=name,
        role=role,
        nodes=parsing.expand_nodes(str(raw["nodes"]), template=template),
        tp=_int(raw, "tp", where) or 1,
        dp=_int(raw, "dp", where) or 1,
        ep=_int(raw, "ep", where) or 1,
        pp=_int(raw, "pp", where) or 1,
        backend=str(raw["backend"]) if "backend" in raw else None,
        chunk=_int(raw, "chunk", where, None),
        placement=placement,
        server_args=tuple(str(a) for a in args),
        env=tuple((str(k), str(v)) for k, v in env.items()),
    )


def _port(v: Any, where: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
        raise ValueError(f"{where}: router port must be 0 (a free one) .. 65535, not {v!r}")
    return v


def _router(raw: Any, where: str) -> RouterSpec:
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: [deployment.router] must be a table")
    _refuse(raw, ROUTER_KEYS, f"{where} [deployment.router]")
    args = raw.get("server_args", [])
    return RouterSpec(
        port=_port(raw.get("port", 8000), where),
        host=str(raw.get("host", "0.0.0.0")),  # noqa: S104
        node=str(raw.get("node", "local")),
        policy=str(raw["policy"]) if "policy" in raw else None,
        server_args=tuple(str(a) for a in args),
    )


def _check(topo: Topology, where: str) -> None:
    names = [g.name for g in topo.groups]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: group names must be unique, got {', '.join(names)}")
    seen: dict[str, str] = {}
    for g in topo.groups:
        for n in g.nodes:
            if n in seen:
                raise ValueError(
                    f"{where}: node {n} is in group {seen[n]} and in group {g.name}; groups own their nodes"
                )
            seen[n] = g.name
    if topo.kind == "pd":
        if not topo.role("prefill") or not topo.role("decode"):
            raise ValueError(f"{where}: a pd deployment needs at least one prefill and one decode group")
        if any(g.role == "serve" for g in topo.groups):
            raise ValueError(f"{where}: a pd deployment has only prefill and decode groups")
        if topo.router is None:
            raise ValueError(f"{where}: a pd deployment needs a router ([deployment.router]): the client talks to it")
    elif any(g.role != "serve" for g in topo.groups):
        raise ValueError(f'{where}: prefill/decode groups need kind = "pd"')


def topology_from_table(raw: Mapping[str, Any], where: str = "profile", template: str = "{}") -> Topology:
    """Parse and check a ``[deployment]`` table; raise :class:`ValueError` naming the key and the file.

    ``template`` is the run's ``--sskj-node-template``: bare node numbers of a group become host names
    exactly as ``--nodes`` does it."""
    where = f"{where} [deployment]"
    _refuse(raw, TOPOLOGY_KEYS, where)
    kind = str(raw.get("kind", "groups"))
    if kind not in _KINDS:
        raise ValueError(f"{where}: kind {kind!r} is not one of {', '.join(_KINDS)}")
    groups_raw = raw.get("groups", [])
    if not isinstance(groups_raw, list) or not groups_raw or not all(isinstance(g, dict) for g in groups_raw):
        raise ValueError(f"{where}: needs [[deployment.groups]] tables (name, role, nodes, sizes)")
    groups = tuple(_group(g, f"{where} group {i + 1}", template) for i, g in enumerate(groups_raw))
    transfer = raw.get("transfer_backend")
    if transfer is not None and str(transfer) not in ("mooncake", "nixl"):
        raise ValueError(f"{where}: transfer_backend {transfer!r} is not mooncake or nixl")
    topo = Topology(
        kind=kind,
        groups=groups,
        router=_router(raw["router"], where) if "router" in raw else None,
        transfer_backend=str(transfer) if transfer is not None else None,
        bootstrap_port=_int(raw, "bootstrap_port", where, None),
        ib_device=str(raw["ib_device"]) if "ib_device" in raw else None,
        page_size=_int(raw, "page_size", where, None),
    )
    _check(topo, where)
    return topo


def _rebase_nodes(topo: Topology, nodes: Sequence[str], nodes_from: str) -> Topology:
    """The groups over ``nodes`` (the run's ``--nodes``), split by each group's node count in declared order."""
    need = [len(g.nodes) for g in topo.groups]
    if len(nodes) != sum(need):
        split = ", ".join(f"{g.name} {len(g.nodes)}" for g in topo.groups)
        raise ValueError(
            f"{nodes_from} gives {len(nodes)} node(s) ({','.join(nodes)}); the deployment's groups take "
            f"{sum(need)} in their declared order ({split})"
            f"\n  accepted: exactly {sum(need)} nodes, rank 0 of each group first; they are split by the group sizes"
            f"\n  Hint: e.g. --nodes {_example(sum(need))}, or change the groups' nodes in a copy of the profile"
        )
    out, at = [], 0
    for g, n in zip(topo.groups, need, strict=True):
        out.append(replace(g, nodes=tuple(nodes[at : at + n])))
        at += n
    return replace(topo, groups=tuple(out))


def _example(n: int) -> str:
    return f"701-{700 + n}"


def _fill(topo: Topology, key: str, values: Sequence[Any], given_by: str) -> Topology:
    """A single run-wide ``backend`` / ``chunk`` becomes the setting of every group without its own."""
    per_group = "backend" if key == "backend" else "chunk"

    def own_value(g: Group) -> Any:
        return g.backend if per_group == "backend" else g.chunk

    own = ", ".join(f"{g.name} {own_value(g)}" for g in topo.groups if own_value(g) is not None)
    hint = (
        f"\n  accepted: per-group settings: {per_group} = ... in each [[deployment.groups]] table ({own or 'none set'})"
        f"\n  Hint: drop {given_by}; to compare {per_group}s, run the deployment once per group setting "
        f"(a copy of the profile each) and compare the runs (python -m pytest_sskj compare RUN_A RUN_B)"
    )
    if len(values) > 1:
        raise ValueError(
            f"{given_by} names {len(values)} values ({','.join(map(str, values))}) for a {topo.kind} deployment: its "
            f"{per_group} is a per-group setting and one deployment is fixed, so there is no A/B across it{hint}"
        )
    if not values:
        return topo
    takes = [g for g in topo.groups if own_value(g) is None and (key == "backend" or g.role != "decode")]
    if not takes:
        raise ValueError(f"{given_by} sets {values[0]} for a {topo.kind} deployment whose groups set their own{hint}")
    return replace(topo, groups=tuple(replace(g, **{per_group: values[0]}) if g in takes else g for g in topo.groups))


def bind_run(
    topo: Topology,
    *,
    nodes: Sequence[str] = (),
    nodes_from: str = "--nodes",
    backends: Sequence[str] = (),
    backends_from: str = "--backend",
    chunks: Sequence[int] = (),
    chunks_from: str = "--chunk",
) -> Topology:
    """The deployment with the run's own values bound into its groups; :class:`ValueError` says what is wrong.

    ``nodes`` (``--nodes`` or the profile's ``nodes``, node template applied): split among the groups by
    their node counts, in declared order (``--nodes 701-708``: prefill 701-704, decode 705-708).  A single
    ``backends`` / ``chunks`` value (given by the user, not an engine default) becomes the setting of each
    group without its own (chunks: not decode groups); several values, or one for groups that all set
    their own, are refused: a deployment is fixed, its backends and chunks are per-group settings.
    """
    if nodes:
        topo = _rebase_nodes(topo, nodes, nodes_from)
    topo = _fill(topo, "backend", backends, backends_from)
    topo = _fill(topo, "chunk", chunks, chunks_from)
    _check(topo, "the deployment")
    return topo
