"""SGLang: ``python -m sglang.launch_server``, one rank per node (or one whole server per node as replicas).

Everything pytest-sskj knows about SGLang lives here: the ``--moe-runner-backend`` choices, the per-node
commands, the parallel-size checks, ``/health_generate``, the healthy-start markers and SGLang's own
failure lines, ``/flush_cache``, and ``/server_info`` -- the *effective* ``ServerArgs`` after SGLang's
own post-processing, which every launched server is verified against (domain.md §8).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_sskj.engines.base import (
    BackendSwitch,
    CacheReset,
    Engine,
    EngineDefaults,
    LogRules,
    SpeculativeSupport,
    VersionFacts,
    host_of,
    sig,
)
from pytest_sskj.engines.sglang_server_info import (
    SERVER_INFO_PATHS,
    attention_dp,
    expected_server_info,
    fetch_server_info,
    flag_value,
    resolved_algorithm,
    verify_server_info,
)
from pytest_sskj.spec import NodeCommand, ServerSpec
from pytest_sskj.speculative import SpecConfig

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "BACKENDS",
    "SERVER_INFO_PATHS",
    "SGLangEngine",
    "expected_server_info",
    "fetch_server_info",
    "resolved_algorithm",
    "router_argv",
    "verify_server_info",
]  # the /server_info verification is re-exported from sglang_server_info

NAME = "sglang"
DEFAULT_PORT = 30000

# --moe-runner-backend choices of sglang 0.5.23 (arg_groups/choices.py MOE_RUNNER_BACKEND_CHOICES, in its order): the
# users' base commit's 17 (domain.md §8.1) plus flashinfer_megamoe, lora_cutedsl, lora_triton, lora_marlin and
# intel_xpu.  unit/contracts/test_sglang_contract.py compares this list with the installed package.
BACKENDS = (
    "auto",
    "deep_gemm",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "flashinfer_megamoe",
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "lora_cutedsl",
    "lora_triton",
    "lora_marlin",
    "hpc_ops",
    "megamoe",
    "intel_xpu",
)
PINNED_VERSION = "0.5.23"
"""The sglang release the command lines, markers and /server_info expectations are checked against
(unit/contracts/test_sglang_contract.py, .ci/install_sglang.sh)."""


_DEFAULTS = EngineDefaults(
    backends=("marlin", "flashinfer_mxfp4"),
    chunks=(4096, 8192, 16384),
    concurrencies=(8, 16),
    isl=16384,
    osl=1,
    requests=40,
    repeats=3,
    endpoint="generate",
    health_timeout_s=1800.0,
    stall_timeout_s=600.0,
    port=DEFAULT_PORT,
)

_MANAGERS = (
    "Scheduler|TokenizerManager|DetokenizerManager|DataParallelController|MultiTokenizerRouter|MultiDetokenizerRouter"
)

_LOGS = LogRules(
    signatures=(
        # PD disaggregation: KV transfer failures (strings from sglang 0.5.23 srt/disaggregation/{mooncake,nixl,
        # common}/conn.py); the request fails, the server keeps running, so "error" (the point fails on it)
        sig("pd_kv_transfer_error", "crash", "error", r"KVTransferError\(bootstrap_room="),
        sig(
            "pd_kv_transfer_failed",
            "crash",
            "error",
            r"KV transfer failed|Room marked Failed before the transfer ended",
        ),
        sig("pd_lost_prefill", "crash", "error", r"Lost connection with prefill instance \(bootstrap_addr: "),
        sig(
            "pd_prefill_down",
            "crash",
            "error",
            r"Prefill server with bootstrap_addr: .* is healthy before, but now it is down",
        ),
        sig("pd_send_kv", "crash", "error", r"Failed to send kv chunk of |Failed to send aux data of "),
        sig(
            "pd_rdma",
            "crash",
            "error",
            r"\[Staging\] Bulk RDMA transfer failed with ret=|NIXL staging transfer failed room=",
        ),
        sig(
            "pd_bootstrap",
            "config",
            "error",
            r"Could not fetch (prefill parallel|bootstrap) info|Prefill bootstrap failed",
        ),
        sig("mem_fraction", "oom", "fatal", r"Not enough memory\. Please try to increase --mem-fraction-static\."),
        sig("prefill_oom", "oom", "fatal", r"Prefill out of memory\. Try to lower your batch size\."),
        sig("decode_oom", "oom", "fatal", r"Decode out of memory\. Try to lower your batch size\."),
        sig("req_slots_oom", "oom", "fatal", r"alloc_req_slots runs out of memory\."),
        sig("scheduler_died_init", "oom", "fatal", r"Rank \d+ scheduler died during initialization \(exit code: -9\)"),
        sig("kv_pool_full", "oom", "warning", r"KV cache pool is full\. Retract requests\."),
        sig("memory_leak", "oom", "error", r"memory leak detected!"),
        sig(
            "soft_watchdog",
            "watchdog",
            "warning",
            r"\w+ watchdog timeout \(self\.watchdog_timeout=[^,]*, self\.soft=True\)",
        ),
        sig("watchdog", "watchdog", "fatal", r"\w+ watchdog timeout \(self\.watchdog_timeout="),
        # the users' rule (seed 000): a failed health check fails the point
        sig(
            "health_check_failed",
            "watchdog",
            "fatal",
            r"Health check failed\. Server couldn't get a response from detokenizer for last",
        ),
        sig("watchdog_thread_crashed", "watchdog", "fatal", r"\b\w+ ?[Ww]atchdog thread crashed: "),
        # what ranks >= 1 log when a scheduler dies (engine.py / data_parallel_controller.py); 0 and -15 (our SIGTERM
        # at teardown) are a clean stop
        sig(
            "scheduler_terminated",
            "crash",
            "fatal",
            r"Scheduler or DataParallelController \d+ terminated with (?!0\b|-15\b)-?\d+",
        ),
        sig("crash_dump", "crash", "fatal", r"Dumping requests before crash\."),
        sig("weights_not_ready", "crash", "fatal", r"Weights are not ready after waiting \d+ seconds\."),
        # the shell that ran the server reports it SIGKILLed (OOM killer): "bash: line 1: 4242 Killed  python3 -m ..."
        sig("shell_killed", "oom", "fatal", r"\b\d+ Killed\s+.*\bsglang\.launch_server\b"),
        sig("manager_exception", "crash", "fatal", rf"\b({_MANAGERS}) hit an exception: "),
        sig(
            "sigquit_child",
            "crash",
            "fatal",
            r"Received sigquit from a child process\. It usually means the child failed\.",
        ),
        sig("sigquit", "crash", "fatal", r"SIGQUIT received\. signum=.*It usually means one child failed\."),
        sig("subprocess_crashed", "crash", "fatal", r"Subprocess \S+ \(pid=\d+\) crashed with exit code -?\d+"),
        sig("scheduler_died", "crash", "fatal", r"Rank \d+ scheduler died during initialization \(exit code: "),
        sig(
            "init_failed",
            "crash",
            "fatal",
            r"Initialization failed\. (Please see the error messages above\.|warmup error: )",
        ),
        sig("cuda_graph_failed", "crash", "fatal", r"Capture cuda graph failed: "),
    ),
    healthy_markers=(
        "Init parallel begin.|Init torch distributed begin.",
        "Init parallel ends.|Init torch distributed ends.",
        "Load weight end.",
        "Memory pool end.",
        "The server is fired up and ready to roll!",
    ),
    rank0_only_markers=frozenset({"The server is fired up and ready to roll!"}),
    # --log-requests echoes request payloads (utils/request_logger.py): a prompt quoting an error is no finding
    benign=(re.compile(r"\b(Receive|Finish): obj="),),
    # warnings logged with exc_info=True (0.5.23 source): their traceback is expected, not a failure
    benign_tracebacks=(
        re.compile(r"post-warmup freeze_gc failed"),
        re.compile(r"cleanup_stale_shm: sweep failed, continuing startup"),
        re.compile(r"get_device_sm: NVML query failed, using torch\.cuda"),
        re.compile(r"Unable to query free device memory"),
    ),
)


def _common_argv(spec: ServerSpec) -> list[str]:
    py = spec.python or ("python3" if spec.nodes else sys.executable)
    common = [py, "-m", "sglang.launch_server"]
    if spec.model_path:
        common += ["--model-path", spec.model_path]
    common += ["--tp-size", str(spec.tp)]
    if spec.ep > 1:
        common += ["--ep-size", str(spec.ep)]
    if attention_dp(spec):
        # multi-node data parallel is attention DP; 0.5.23 deprecates --enable-dp-attention for --attn-dp-size N
        # and resolves it to dp_size=1, attn_dp_size=N, chunked_prefill_size // N
        common += ["--attn-dp-size", str(spec.dp)]
    elif spec.dp > 1:
        common += ["--dp-size", str(spec.dp)]
    if spec.pp > 1:
        common += ["--pp-size", str(spec.pp)]
    common += ["--moe-runner-backend", spec.backend]
    if spec.chunk is not None:
        common += ["--chunked-prefill-size", str(spec.chunk)]
    if spec.disable_radix_cache:
        common += ["--disable-radix-cache"]
    common += ["--host", spec.host, "--port", str(spec.port or DEFAULT_PORT)]
    return common


def _check_world(s: Settings) -> None:
    from pytest_sskj.validate import usage

    nnodes = max(1, len(s.nodes))
    world = s.tp * s.pp
    if world % nnodes:
        fits = ", ".join(str(n) for n in range(1, world + 1) if world % n == 0 and world // n <= s.gpus_per_node)
        raise usage(
            f"--tp {s.tp} x --pp {s.pp} = {world} GPUs cannot be split evenly over {nnodes} node(s) "
            f"({', '.join(s.nodes) or 'local'})",
            f"a node count that divides {world}",
            f"use a node count that divides {world}, e.g. --nodes with {fits} node(s)",
        )
    if world // nnodes > s.gpus_per_node:
        raise usage(
            f"--tp {s.tp} x --pp {s.pp} = {world} GPUs over {nnodes} node(s) needs {world // nnodes} GPUs per node, "
            f"but nodes have {s.gpus_per_node}",
            f"TP x PP / nodes <= {s.gpus_per_node} (--sskj-gpus-per-node)",
            "add nodes, lower --tp, or set --sskj-gpus-per-node",
        )
    if s.tp % s.ep:
        raise usage(
            f"--ep {s.ep} must divide --tp {s.tp} (SGLang splits MoE TP as tp/ep)",
            f"--ep a divisor of --tp {s.tp}",
            "e.g. --tp 32 --ep 4",
        )


SPECULATIVE = SpeculativeSupport(
    algorithms=("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP", "NEXTN"),
    keys=("draft", "steps", "topk", "draft_tokens"),
    source="sglang 0.5.23 SpeculativeAlgorithm, resolved case-insensitively; NEXTN is EAGLE",
    needs_draft=frozenset({"DFLASH", "DSPARK"}),
    no_draft=frozenset({"UNO"}),
)
"""sglang 0.5.23's speculative algorithms (``sglang/srt/speculative/spec_info.py``) and what its resolution
refuses (``ServerArgs``: DFLASH and DSPARK need ``--speculative-draft-model-path`` and PP 1, UNO refuses a draft
and needs ``--uno-lora-path``); the contract suite checks every rule against the installed package."""
_SPEC_FLAGS = {
    "draft": "--speculative-draft-model-path",
    "steps": "--speculative-num-steps",
    "topk": "--speculative-eagle-topk",
    "draft_tokens": "--speculative-num-draft-tokens",
}
_TREE = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
"""Draft-tree algorithms: sglang 0.5.23 resolves none of steps/topk/draft_tokens (it picks them) or steps and topk
together (draft_tokens derived when not given); any other subset fails in ``ServerArgs`` (a TypeError or an
assertion)."""
_IGNORED = {"DFLASH": ("steps", "topk"), "DSPARK": ("steps", "topk"), "NGRAM": ("topk",)}
"""Keys sglang 0.5.23 overrides for these algorithms (DFLASH/DSPARK resolve steps 1, topk 1; NGRAM topk 10)."""
_SINGLE_STAGE = frozenset({"DFLASH", "DSPARK"})
"""Algorithms sglang 0.5.23 runs at pipeline-parallel size 1 only (DSPARK: except on a PD prefill server)."""


class SGLangEngine(Engine):
    name = NAME
    description = "python -m sglang.launch_server, one rank per node"
    backends = BACKENDS
    backend_switch = BackendSwitch("flag", flag="--moe-runner-backend")
    reference_job = "the users' Kimi-K3 prefill A/B (seed 000): ISL 16K, OSL 1, marlin vs flashinfer_mxfp4"
    defaults = _DEFAULTS
    endpoints = ("generate", "completions", "chat")
    health_path = "/health_generate"
    logs = _LOGS
    versions = VersionFacts(
        distributions=("sglang",), modules=("sglang", "sgl_kernel", "flashinfer", "torch"), checked=PINNED_VERSION
    )
    cache_reset = CacheReset("POST", "/flush_cache", method_on_405="GET")
    restart_cost = "expensive"
    point_budget_s = 900.0
    token_ids = "sglang-generate"  # noqa: S105 - a dialect name: native POST /generate, output_ids
    verifies_config_at_start = True
    config_facts = (
        "version",
        "moe_runner_backend",
        "chunked_prefill_size",
        "tp_size",
        "ep_size",
        "dp_size",
        "attn_dp_size",
    )

    speculative = SPECULATIVE

    def speculative_args(self, cfg: SpecConfig) -> tuple[str, ...]:
        out = ["--speculative-algorithm", SPECULATIVE.canonical(cfg.algorithm) or cfg.algorithm]
        for key, value in cfg.params:
            out += [_SPEC_FLAGS[key], str(value)]
        return tuple(out)

    def speculative_problems(self, cfg: SpecConfig, settings: Settings) -> list[str]:
        out = super().speculative_problems(cfg, settings)
        algo = SPECULATIVE.canonical(cfg.algorithm)
        given = {k for k, _ in cfg.params}
        tree = given & {"steps", "topk", "draft_tokens"}
        if algo in _TREE and tree and not {"steps", "topk"} <= tree:
            out.append(f"{algo} takes steps= and topk= together (draft_tokens= optional) or none of the three")
        ignored = [k for k in _IGNORED.get(algo or "", ()) if k in given]
        if ignored:
            out.append(f"sglang ignores {', '.join(k + '=' for k in ignored)} for {algo}: drop it")
        if algo in _SINGLE_STAGE and settings.pp != 1:
            out.append(f"sglang runs {algo} at pipeline-parallel size 1 only, not --pp {settings.pp}")
        if algo == "UNO" and not flag_value(settings.server_args, "--uno-lora-path"):
            out.append("UNO needs its LoRA: add --sskj-server-arg=--uno-lora-path=PATH")
        return out

    def node_commands(self, spec: ServerSpec) -> list[NodeCommand]:
        common = _common_argv(spec)
        port = spec.port or DEFAULT_PORT
        if spec.placement == "replicas" or spec.nnodes == 1:
            return [
                NodeCommand(host_of(spec, rank), rank, (*common, *spec.extra_args), spec.env, True, port)
                for rank in range(spec.nnodes)
            ]
        init = f"{spec.dist_init_host or spec.nodes[0]}:{spec.dist_init_port}"
        cmds: list[NodeCommand] = []
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
            cmds.append(NodeCommand(host_of(spec, rank), rank, argv, spec.env, rank == 0, port))
        return cmds

    def check_settings(self, settings: Settings) -> None:
        _check_world(settings)

    def served_labels(self, url: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], dict[str, str]]:
        info = fetch_server_info(url, timeout_s)
        if info is None:
            why = "the server answers neither /server_info nor /get_server_info"
            return {}, {k: why for k in ("backend", "chunk", "tp", "ep", "dp", "pp", "model_path")}
        attn = info.get("attn_dp_size") if isinstance(info.get("attn_dp_size"), int) else 1
        dp = attn if attn and attn > 1 else info.get("dp_size")
        served = {
            "version": info.get("version"),
            "backend": info.get("moe_runner_backend"),
            "chunk": info.get("chunked_prefill_size"),
            "chunk_divisor": attn or 1,
            "tp": info.get("tp_size"),
            "ep": info.get("ep_size"),
            "dp": dp,
            "pp": info.get("pp_size"),
            "model_path": info.get("model_path"),
            "source": "/server_info",
        }
        missing = {k: f"/server_info reports no {k}" for k, v in served.items() if v is None}
        return {k: v for k, v in served.items() if v is not None}, missing

    def read_config(self, url: str) -> dict[str, Any] | None:
        info = fetch_server_info(url)
        return dict(info) if info is not None else None

    def verify_config(self, spec: ServerSpec, info: Mapping[str, Any]) -> list[str]:
        return verify_server_info(spec, info)

    def live_config_problems(self, spec: ServerSpec, url: str) -> list[str]:
        info = fetch_server_info(url)
        if info is None:
            return [f"{url.rstrip('/')}/server_info did not answer after the point"]
        return verify_server_info(spec, info)

    def disaggregation_args(
        self,
        role: str,
        *,
        transfer_backend: str | None = None,
        bootstrap_port: int | None = None,
        ib_device: str | None = None,
        page_size: int | None = None,
    ) -> tuple[str, ...]:
        """PD flags (domain.md §10): mode, transfer backend, bootstrap port (prefill side), IB devices, and the
        page size both sides must share; a plain group gets only the page size."""
        if role == "serve":
            return ("--page-size", str(page_size)) if page_size else ()
        if role not in ("prefill", "decode"):
            raise ValueError(f"a PD group's role is prefill or decode, not {role!r}")
        out = ["--disaggregation-mode", role]
        if transfer_backend:
            out += ["--disaggregation-transfer-backend", transfer_backend]
        if role == "prefill" and bootstrap_port:
            out += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
        if ib_device:
            out += ["--disaggregation-ib-device", ib_device]
        if page_size:
            out += ["--page-size", str(page_size)]
        return tuple(out)

    def config_mismatches(self, spec: ServerSpec, info: Mapping[str, Any] | None) -> list[str]:
        if not info:
            return []
        expected: dict[str, Any] = {"moe_runner_backend": spec.backend, "tp_size": spec.tp, "ep_size": spec.ep}
        if spec.chunk is not None:
            expected["chunked_prefill_size"] = spec.chunk
        if spec.disable_radix_cache:
            expected["disable_radix_cache"] = True
        return [
            f"{key}={info[key]!r} (spec'd {want!r})"
            for key, want in expected.items()
            if key in info and str(info[key]) != str(want)
        ]


def router_argv(
    python: str,
    *,
    prefill: Sequence[tuple[str, int | None]] = (),
    decode: Sequence[str] = (),
    workers: Sequence[str] = (),
    host: str = "0.0.0.0",  # noqa: S104 - the client may run elsewhere
    port: int = 8000,
    policy: str | None = None,
    extra: Sequence[str] = (),
) -> tuple[str, ...]:
    """``python -m sglang_router.launch_router`` (the compiled ``sglang-router`` from PyPI): PD routing
    (``--pd-disaggregation --prefill URL [BOOTSTRAP_PORT] --decode URL``, domain.md §10) when prefill/decode
    URLs are given, else regular routing over ``--worker-urls`` (it fronts any OpenAI-compatible servers)."""
    argv = [python, "-m", "sglang_router.launch_router"]
    if prefill or decode:
        if not prefill or not decode or workers:
            raise ValueError("a PD router needs prefill and decode URLs (and no plain worker URLs)")
        argv.append("--pd-disaggregation")
        for url, boot in prefill:
            argv += ["--prefill", url, *([str(boot)] if boot else [])]
        for url in decode:
            argv += ["--decode", url]
    elif workers:
        argv += ["--worker-urls", *workers]
    else:
        raise ValueError("a router needs worker URLs, or prefill and decode URLs")
    if policy:
        argv += ["--policy", policy]
    argv += ["--host", host, "--port", str(port), *extra]
    return tuple(argv)
