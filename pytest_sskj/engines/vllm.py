"""vLLM: ``vllm serve`` (single node, or multi-node data parallel with headless ranks).

Moved here unchanged from the old tables (engines.py, server/spec.py, health, logscan, pre-flight): the
known findings of issue 11 (backend switches that are not vLLM 0.32 variables, no effective-config check,
no cache reset, the CPU pre-flight) are the vLLM owner's to fix in this module.  The effective config is not
read (before the move the runner asked vLLM for SGLang's ``/server_info``, which vLLM answers with 404, so
nothing was checked either).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pytest_sskj.engines.base import BackendSwitch, CacheReset, Engine, LogRules, VersionFacts, host_of, sig
from pytest_sskj.server.spec import NodeCommand, ServerSpec

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["BACKEND_ENV", "VllmEngine"]

NAME = "vllm"
DEFAULT_PORT = 8000

# vLLM selects MXFP4 MoE kernels through environment switches rather than a flag.
BACKEND_ENV: Mapping[str, tuple[tuple[str, str], ...]] = MappingProxyType(
    {
        "auto": (),
        "marlin": (("VLLM_MXFP4_USE_MARLIN", "1"),),
        "flashinfer_mxfp4": (("VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8", "1"),),
        "triton": (("VLLM_MXFP4_USE_MARLIN", "0"),),
    }
)

_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {
        "backends": ("auto",),
        "chunks": (8192,),
        "concurrencies": (8, 16),
        "isl": 16384,
        "osl": 1,
        "requests": 40,
        "repeats": 3,
        "endpoint": "completions",
        "health_timeout_s": 1800.0,
        "stall_timeout_s": 600.0,
        "port": DEFAULT_PORT,
    }
)

_LOGS = LogRules(
    signatures=(
        sig(
            "vllm_engine_dead",
            "crash",
            "fatal",
            r"\bEngineDeadError\b|EngineCore encountered an issue\. See stack trace \(above\) for the root cause\.",
        ),
    ),
    healthy_markers=("Application startup complete.",),
    rank0_only_markers=frozenset({"Application startup complete."}),
)


def _base_argv(spec: ServerSpec) -> list[str]:
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
    return base


class VllmEngine(Engine):
    name = NAME
    description = "vllm serve (single node, or multi-node data parallel)"
    backends = tuple(BACKEND_ENV)
    backend_switch = BackendSwitch("env", env=BACKEND_ENV)
    defaults = _DEFAULTS
    endpoints = ("completions", "chat", "generate")
    health_path = "/health"
    logs = _LOGS
    versions = VersionFacts(distributions=("vllm",), modules=("vllm", "flashinfer", "torch"))
    cache_reset = CacheReset("POST", "/flush_cache")
    restart_cost = "expensive"
    point_budget_s = 900.0
    token_ids = "OpenAI POST /v1/completions, return_token_ids: true"  # noqa: S105 - not a secret
    verifies_config_at_start = False

    def check_settings(self, settings: Settings) -> None:
        """vLLM's expert parallelism is TP x DP (``--enable-expert-parallel``), multi-node data parallelism
        spreads DP ranks evenly, and every node must hold its share of TP x PP x DP."""
        from pytest_sskj.validate import usage

        s = settings
        if s.ep != 1 and s.ep != s.tp * s.dp:
            raise usage(
                f"vLLM's expert-parallel size is TP x DP = {s.tp * s.dp}; --ep {s.ep} cannot be set apart from them",
                f"--ep 1 (no expert parallelism) or --ep {s.tp * s.dp} (--enable-expert-parallel)",
                f"e.g. --tp {s.tp} --ep {s.tp * s.dp}",
            )
        nnodes = max(1, len(s.nodes))
        ranks = s.placement == "ranks" and nnodes > 1
        if ranks and s.dp % nnodes:
            raise usage(
                f"vLLM spreads data-parallel ranks evenly over nodes: --dp {s.dp} over {nnodes} nodes "
                f"({', '.join(s.nodes)}) does not divide",
                f"--dp a multiple of the node count ({nnodes}, {2 * nnodes}, ...)",
                f"e.g. --dp {nnodes} --tp {max(1, s.tp // nnodes)}, or --sskj-placement replicas for independent "
                "servers",
            )
        per_node = (s.dp // nnodes if ranks else s.dp) * s.tp * s.pp
        if per_node > s.gpus_per_node:
            raise usage(
                f"vLLM with TP{s.tp} x PP{s.pp} x DP{s.dp} needs {per_node} GPUs per node, but nodes have "
                f"{s.gpus_per_node}",
                f"TP x PP x DP per node <= {s.gpus_per_node} (--sskj-gpus-per-node)",
                "lower --tp, add nodes with --dp, or set --sskj-gpus-per-node",
            )

    def node_commands(self, spec: ServerSpec) -> list[NodeCommand]:
        base = _base_argv(spec)
        port = spec.port or DEFAULT_PORT
        env = (*BACKEND_ENV.get(spec.backend, ()), *spec.env)
        if spec.placement == "replicas" or spec.nnodes == 1:
            cmds: list[NodeCommand] = []
            for rank in range(spec.nnodes):
                argv = [*base, "--data-parallel-size", str(spec.dp)] if spec.dp > 1 else list(base)
                argv += ["--host", spec.host, "--port", str(port), *spec.extra_args]
                cmds.append(NodeCommand(host_of(spec, rank), rank, tuple(argv), env, True, port))
            return cmds
        return self._multi_node(spec, base, env, port)

    def _multi_node(
        self, spec: ServerSpec, base: list[str], env: tuple[tuple[str, str], ...], port: int
    ) -> list[NodeCommand]:
        """Multi-node data parallel: dp ranks spread evenly, rank 0 serves the API, the others run headless."""
        if spec.dp % spec.nnodes:
            raise ValueError(f"vLLM multi-node needs --dp ({spec.dp}) divisible by the node count ({spec.nnodes})")
        local = spec.dp // spec.nnodes
        cmds: list[NodeCommand] = []
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
            cmds.append(NodeCommand(host_of(spec, rank), rank, tuple(argv), env, rank == 0, port))
        return cmds

    def world_size(self, spec: ServerSpec) -> int:
        return spec.tp * spec.pp * spec.dp
