"""``ServerSpec``: everything that identifies one server deployment, and its per-node commands.

A spec is frozen and hashable: the server pool keys running servers by it, so two tests with the
same spec share one server.  :func:`node_commands` turns a spec into the exact argv and environment
of every node (rank 0 first) for the engine; the dry run prints them, the launchers run them.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from pytest_sskj.report.redact import redact_argv, redact_env_items

__all__ = ["NodeCommand", "ServerSpec", "node_commands", "spec_from_settings"]


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
    labels: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.placement not in ("ranks", "replicas"):
            raise ValueError(f"placement must be 'ranks' or 'replicas', not {self.placement!r}")

    @property
    def nnodes(self) -> int:
        return max(1, len(self.nodes))

    @property
    def label(self) -> str:
        """Short human label: ``flashinfer_mxfp4-chunk8192``."""
        return f"{self.backend}-chunk{self.chunk}" if self.chunk else self.backend

    def key(self) -> str:
        """Stable 12-hex digest of the spec (env values included, so a changed secret changes the key)."""
        d = asdict(self)
        d.pop("labels", None)
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
    """Rank 0 (or every replica) serves the API; SGLang ranks >= 1 only run a dummy health server."""
    port: int = 0

    def shell(self, *, redact: bool = True) -> str:
        """The command as one shell line, environment first; secret values redacted unless ``redact=False``."""
        env = redact_env_items(self.env) if redact else self.env
        parts = [f"{k}={shlex.quote(v)}" for k, v in env]
        argv = redact_argv(self.argv) if redact else self.argv  # --api-key V, --hf-token=V
        return " ".join([*parts, *(shlex.quote(a) for a in argv)])


def _host(spec: ServerSpec, rank: int) -> str:
    return spec.nodes[rank] if spec.nodes else "local"


def _sglang(spec: ServerSpec) -> list[NodeCommand]:
    py = spec.python or ("python3" if spec.nodes else sys.executable)
    common = [py, "-m", "sglang.launch_server"]
    if spec.model_path:
        common += ["--model-path", spec.model_path]
    common += ["--tp-size", str(spec.tp)]
    if spec.ep > 1:
        common += ["--ep-size", str(spec.ep)]
    if spec.dp > 1:
        common += ["--dp-size", str(spec.dp)]
        if spec.nnodes > 1 and spec.placement == "ranks":
            common += ["--enable-dp-attention"]
    if spec.pp > 1:
        common += ["--pp-size", str(spec.pp)]
    common += ["--moe-runner-backend", spec.backend]
    if spec.chunk is not None:
        common += ["--chunked-prefill-size", str(spec.chunk)]
    if spec.disable_radix_cache:
        common += ["--disable-radix-cache"]
    port = spec.port or 30000
    common += ["--host", spec.host, "--port", str(port)]
    cmds: list[NodeCommand] = []
    if spec.placement == "replicas" or spec.nnodes == 1:
        for rank in range(spec.nnodes):
            cmds.append(NodeCommand(_host(spec, rank), rank, (*common, *spec.extra_args), spec.env, True, port))
        return cmds
    init = f"{spec.dist_init_host or spec.nodes[0]}:{spec.dist_init_port}"
    for rank in range(spec.nnodes):
        argv = (
            *common,
            "--nnodes",
            str(spec.nnodes),
            "--node-rank",
            str(rank),
            "--dist-init-addr",
            init,
            *spec.extra_args,
        )
        cmds.append(NodeCommand(_host(spec, rank), rank, argv, spec.env, rank == 0, port))
    return cmds


# vLLM selects MXFP4 MoE kernels through environment switches rather than a flag.
_VLLM_BACKEND_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    "auto": (),
    "marlin": (("VLLM_MXFP4_USE_MARLIN", "1"),),
    "flashinfer_mxfp4": (("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "1"),),
    "triton": (("VLLM_MXFP4_USE_MARLIN", "0"),),
}


def _vllm(spec: ServerSpec) -> list[NodeCommand]:
    exe = [spec.python, "-m", "vllm.entrypoints.cli.main", "serve"] if spec.python else ["vllm", "serve"]
    base = [*exe, spec.model_path or "MODEL", "--tensor-parallel-size", str(spec.tp)]
    if spec.pp > 1:
        base += ["--pipeline-parallel-size", str(spec.pp)]
    if spec.ep > 1:
        base += ["--enable-expert-parallel"]
    if spec.chunk is not None:
        base += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(spec.chunk)]
    if spec.disable_radix_cache:
        base += ["--no-enable-prefix-caching"]
    port = spec.port or 8000
    env = (*_VLLM_BACKEND_ENV.get(spec.backend, ()), *spec.env)
    cmds: list[NodeCommand] = []
    if spec.placement == "replicas" or spec.nnodes == 1:
        for rank in range(spec.nnodes):
            argv = [*base, "--data-parallel-size", str(spec.dp)] if spec.dp > 1 else list(base)
            argv += ["--host", spec.host, "--port", str(port), *spec.extra_args]
            cmds.append(NodeCommand(_host(spec, rank), rank, tuple(argv), env, True, port))
        return cmds
    # multi-node data parallel: dp ranks spread evenly, rank 0 serves the API, the others run headless
    if spec.dp % spec.nnodes:
        raise ValueError(f"vLLM multi-node needs --dp ({spec.dp}) divisible by the node count ({spec.nnodes})")
    local = spec.dp // spec.nnodes
    for rank in range(spec.nnodes):
        argv = [
            *base,
            "--data-parallel-size",
            str(spec.dp),
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            spec.dist_init_host or spec.nodes[0],
            "--data-parallel-rpc-port",
            str(spec.dist_init_port),
        ]
        if rank == 0:
            argv += ["--host", spec.host, "--port", str(port)]
        else:
            argv += ["--headless", "--data-parallel-start-rank", str(rank * local)]
        argv += list(spec.extra_args)
        cmds.append(NodeCommand(_host(spec, rank), rank, tuple(argv), env, rank == 0, port))
    return cmds


EMBEDDED_SLOTS = {"parallel": 8, "serial": 1}


def _embedded(spec: ServerSpec) -> list[NodeCommand]:
    from pytest_sskj.server.embedded import serve_argv  # one definition of the embedded engine's argv

    argv = serve_argv(
        spec.model_path or "<generated tiny.gguf>",
        host="127.0.0.1" if not spec.nodes else spec.host,
        port=spec.port,
        slots=EMBEDDED_SLOTS[spec.backend],
        batch=spec.chunk,
        alias=None,
        python=spec.python or ("python3" if spec.nodes else sys.executable),
    )
    argv += list(spec.extra_args)
    return [NodeCommand(_host(spec, r), r, tuple(argv), spec.env, True, spec.port) for r in range(spec.nnodes)]


_BUILDERS = {"sglang": _sglang, "vllm": _vllm, "embedded": _embedded}


def node_commands(spec: ServerSpec) -> list[NodeCommand]:
    """The exact command of every node for ``spec``, rank 0 first."""
    try:
        builder = _BUILDERS[spec.engine]
    except KeyError:
        raise ValueError(f"no command builder for engine {spec.engine!r}; known: {', '.join(_BUILDERS)}") from None
    return builder(spec)


def spec_from_settings(
    settings: object, *, backend: str, chunk: int | None, extra: Iterable[tuple[str, str]] = ()
) -> ServerSpec:
    """Build the spec of one (backend, chunk) point from resolved :class:`~pytest_sskj.settings.Settings`."""
    from pytest_sskj.settings import Settings

    assert isinstance(settings, Settings)
    s = settings
    return ServerSpec(
        engine=s.engine,
        backend=backend,
        model_path=s.model_path,
        nodes=s.nodes,
        tp=s.tp,
        ep=s.ep,
        dp=s.dp,
        pp=s.pp,
        chunk=chunk,
        port=s.port,
        dist_init_port=s.dist_init_port,
        placement=s.placement,
        extra_args=s.server_args,
        env=s.env,
        python=s.python,
        labels=tuple(extra),
    )
