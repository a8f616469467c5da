"""``ServerSpec``: everything that identifies one server deployment, and its per-node commands.

A spec is frozen and hashable: the server pool keys running servers by it, so two tests with the
same spec share one server.  :class:`NodeCommand` is the exact argv and environment of one node; the
spec's engine builds them (:func:`pytest_sskj.engines.node_commands`, rank 0 first); the dry run prints
them, the launchers run them.  This module is data only: it imports no engine and no server code.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING

from pytest_sskj.redact import redact_argv, redact_env_items

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["NodeCommand", "ServerSpec", "SpecOverride", "narrowed_settings", "spec_from_settings"]


@dataclass(frozen=True)
class ServerSpec:
    """One server deployment: engine, model, nodes, parallel sizes, backend, chunk, args and env."""

    engine: str
    backend: str
    model_path: str | None = None
    nodes: tuple[str, ...] = ()
    """Hosts, rank 0 first; empty means this machine."""
    tp: int = 1
    ep: int = 1
    dp: int = 1
    pp: int = 1
    chunk: int | None = None
    port: int = 0
    """HTTP port; 0 lets the launcher pick a free one (local launches only)."""
    dist_init_port: int = 5000
    dist_init_host: str | None = None
    """Address of node 0 for the rendezvous (``--dist-init-addr``); the pool fills it from the launcher's
    resolution of ``nodes[0]`` (an ssh alias such as ``601`` may not resolve on the nodes themselves)."""
    placement: str = "ranks"
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    python: str | None = None
    disable_radix_cache: bool = True
    host: str = "0.0.0.0"  # noqa: S104 - servers must be reachable from the client node
    instance: int = 0
    """0: the server of this configuration; n >= 1: the n-th extra, independently launched identical server
    (an A/A control, ``--backend marlin,marlin``).  Part of the key, so the pool never shares the two."""
    labels: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.placement not in ("ranks", "replicas"):
            raise ValueError(f"placement must be 'ranks' or 'replicas', not {self.placement!r}")

    @property
    def nnodes(self) -> int:
        return max(1, len(self.nodes))

    @property
    def label(self) -> str:
        """Short human label: ``flashinfer_mxfp4-chunk8192``, ``marlin+dflash-chunk8192`` (a speculative arm)."""
        spec = dict(self.labels).get("speculative")
        arm = f"{self.backend}+{spec.split('=', 1)[0]}" if spec else self.backend
        return f"{arm}-chunk{self.chunk}" if self.chunk else arm

    def key(self) -> str:
        """Stable 12-hex digest of the spec (env values included, so a changed secret changes the key)."""
        d = asdict(self)
        d.pop("labels", None)
        if not self.instance:
            d.pop("instance")  # keys of ordinary servers unchanged by the A/A field
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    def with_(self, **changes: object) -> ServerSpec:
        return replace(self, **changes)  # type: ignore[arg-type]

    def as_dict(self, *, redact: bool = True) -> dict[str, object]:
        d = asdict(self)
        d["env"] = dict(redact_env_items(self.env)) if redact else dict(self.env)
        d["labels"] = dict(self.labels)
        return d


@dataclass(frozen=True)
class NodeCommand:
    """The exact command for one node (one rank, or one replica)."""

    node: str
    """Host name, or ``"local"``."""
    rank: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    serves_http: bool = True
    """Rank 0 (or every replica) serves the API; multi-node ranks >= 1 may only run a dummy health server."""
    port: int = 0

    def shell(self, *, redact: bool = True) -> str:
        """The command as one shell line, environment first; secret values redacted unless ``redact=False``."""
        env = redact_env_items(self.env) if redact else self.env
        parts = [f"{k}={shlex.quote(v)}" for k, v in env]
        argv = redact_argv(self.argv) if redact else self.argv  # --api-key V, --hf-token=V
        return " ".join([*parts, *(shlex.quote(a) for a in argv)])


@dataclass(frozen=True)
class SpecOverride:
    """What a layout (``--layout``) or a deployment group changes of the run's spec: its nodes, parallel sizes
    and placement (``None``: the run's), server args and env added after the run's, its labels."""

    nodes: tuple[str, ...] | None = None
    tp: int | None = None
    ep: int | None = None
    dp: int | None = None
    pp: int | None = None
    placement: str | None = None
    server_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()


def spec_from_settings(
    settings: Settings,
    *,
    backend: str,
    chunk: int | None,
    extra: Iterable[tuple[str, str]] = (),
    override: SpecOverride | None = None,
    instance: int = 0,
) -> ServerSpec:
    """The one ServerSpec builder: the spec of one (backend, chunk) point from resolved
    :class:`~pytest_sskj.settings.Settings`, with a layout's or a deployment group's ``override`` applied
    (``extra``: labels; ``instance``: the n-th separate server of an A/A control)."""
    s = settings
    o = override or SpecOverride()

    def pick(mine: int | None, run: int) -> int:
        return run if mine is None else mine

    return ServerSpec(
        engine=s.engine,
        backend=backend,
        model_path=s.model_path,
        nodes=s.nodes if o.nodes is None else o.nodes,
        tp=pick(o.tp, s.tp),
        ep=pick(o.ep, s.ep),
        dp=pick(o.dp, s.dp),
        pp=pick(o.pp, s.pp),
        chunk=chunk,
        port=s.port,
        dist_init_port=s.dist_init_port,
        placement=s.placement if o.placement is None else o.placement,
        extra_args=(*s.server_args, *o.server_args),
        env=(*s.env, *o.env),
        python=s.python,
        instance=instance,
        labels=(*tuple(extra), *o.labels),
    )


def narrowed_settings(
    settings: Settings,
    override: SpecOverride,
    *,
    backends: tuple[str, ...] | None = None,
    chunks: tuple[int, ...] | None = None,
) -> Settings:
    """The run's settings as the one server of a layout or deployment group sees them, for the engine's
    :meth:`~pytest_sskj.engines.base.Engine.check_settings`: the ``override``'s nodes, parallel sizes and
    placement applied the way :func:`spec_from_settings` applies them, no layouts and no deployment (the cell is
    one server), and the group's own ``backends`` / ``chunks`` where given.  Args and env stay the run's: the
    checks judge what the user set for the run."""

    def pick(mine: int | None, run: int) -> int:
        return run if mine is None else mine

    s, o = settings, override
    return replace(
        s,
        nodes=s.nodes if o.nodes is None else o.nodes,
        tp=pick(o.tp, s.tp),
        ep=pick(o.ep, s.ep),
        dp=pick(o.dp, s.dp),
        pp=pick(o.pp, s.pp),
        placement=s.placement if o.placement is None else o.placement,
        layouts=(),
        deployment=None,
        backends=s.backends if backends is None else backends,
        chunks=s.chunks if chunks is None else chunks,
    )
