"""Verify an already running server (``--target-url`` / ``--sskj-deployment``) instead of trusting its labels.

:func:`check_target` asks the server what it runs and compares every label the run was given (``backend``,
``chunk``, the layout ``tp``/``ep``/``dp``/``pp``, ``model_path``) with it:

* **SGLang** (and the stand-in cluster, which serves SGLang's own ``/server_info``): ``/server_info`` (then
  ``/get_server_info``) gives ``moe_runner_backend``, ``chunked_prefill_size`` (divided by ``attn_dp_size``
  under DP attention), ``tp_size``/``ep_size``/``dp_size``/``attn_dp_size``/``pp_size``, ``model_path`` and
  ``version``: every label can be verified.
* **vLLM**: ``/version`` (version) and ``/v1/models`` (served model id/root and ``max_model_len``) always;
  ``/server_info?config_format=json`` only with ``VLLM_SERVER_DEV_MODE=1`` (then ``moe_backend``,
  ``max_num_batched_tokens``, the parallel sizes); ``/metrics`` (``vllm:cache_config_info``).  Without dev mode
  the backend, chunk and layout cannot be verified, and the run says so.
* **embedded** (llama.cpp): ``/props`` gives the model file; the backend and chunk are not reported.

A label that contradicts the server is a contradiction (the caller refuses the run, category environment,
naming label and served value); a label the server does not report is *not verified* and :meth:`TargetCheck.note`
is the sentence every verdict of the run carries ("labels not verified: backend (vLLM exposes no MoE backend
...)").  ``served`` is what the server reported (recorded in the manifest as ``target``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sskj.settings import Settings

__all__ = ["TargetCheck", "check_target", "given_labels"]

_GIVEN = ("cli", "env", "ini", "profile")


@dataclass(frozen=True)
class TargetCheck:
    url: str
    engine: str
    served: dict[str, Any] = field(default_factory=dict)
    verified: tuple[str, ...] = ()
    unverified: tuple[tuple[str, str], ...] = ()
    """``(label, why it cannot be verified)``."""
    contradictions: tuple[str, ...] = ()

    def note(self) -> str:
        """``labels not verified: backend (why), chunk (why)``; empty when every label was verified."""
        if not self.unverified:
            return ""
        return "labels not verified: " + ", ".join(f"{k} ({why})" for k, why in self.unverified)

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "engine": self.engine,
            "served": dict(self.served),
            "verified": list(self.verified),
            "not_verified": {k: why for k, why in self.unverified},
            "contradictions": list(self.contradictions),
        }


def given_labels(settings: Settings) -> dict[str, Any]:
    """The labels the run claims for the target: every backend that is not ``auto``, the chunk(s), the layout
    sizes and the model path when given (cli, env, ini, profile; an engine default is no claim)."""
    src = settings.sources
    out: dict[str, Any] = {}
    backends = [b for b in settings.backends if b != "auto"]
    if backends and src.get("backends") in _GIVEN:
        out["backend"] = backends
    if settings.chunks and src.get("chunks") in _GIVEN:
        out["chunk"] = list(settings.chunks)
    for k in ("tp", "ep", "dp", "pp"):
        if src.get(k) in _GIVEN:
            out[k] = getattr(settings, k)
    if settings.model_path and src.get("model_path") in _GIVEN:
        out["model_path"] = settings.model_path
    return out


def _get(url: str, path: str, timeout_s: float, **params: str) -> Any:
    import httpx

    try:
        r = httpx.get(url.rstrip("/") + path, params=params or None, timeout=timeout_s, trust_env=False)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    if path == "/metrics":
        return r.text
    try:
        return r.json()
    except ValueError:
        return None


def _sglang_served(url: str, timeout_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    from pytest_sskj.engines.sglang import fetch_server_info

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


def _vllm_served(url: str, timeout_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    from pytest_sskj.engines.vllm import flatten_server_info, metrics_cache_config

    served: dict[str, Any] = {"sources": []}
    version = _get(url, "/version", timeout_s)
    if isinstance(version, Mapping) and version.get("version"):
        served["version"] = version["version"]
        served["sources"].append("/version")
    models = _get(url, "/v1/models", timeout_s)
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        m = data[0]
        served.update(model=m.get("id"), model_path=m.get("root") or m.get("id"), max_model_len=m.get("max_model_len"))
        served["sources"].append("/v1/models")
    metrics = _get(url, "/metrics", timeout_s)
    if isinstance(metrics, str):
        gauge = metrics_cache_config(metrics)
        if gauge:
            served["cache_config"] = {k: gauge[k] for k in ("block_size", "enable_prefix_caching") if k in gauge}
        served["sources"].append("/metrics")
    info = _get(url, "/server_info", timeout_s, config_format="json")
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


def _embedded_served(url: str, timeout_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    props = _get(url, "/props", timeout_s)
    served: dict[str, Any] = {}
    if isinstance(props, Mapping):
        served["model_path"] = props.get("model_path")
        served["source"] = "/props"
    why = "the embedded llama.cpp server does not report it"
    missing = {k: why for k in ("backend", "chunk", "tp", "ep", "dp", "pp")}
    if not served.get("model_path"):
        missing["model_path"] = why
    return {k: v for k, v in served.items() if v is not None}, missing


_READERS = {"sglang": _sglang_served, "vllm": _vllm_served, "embedded": _embedded_served}


def _matches(label: str, want: Any, served: Mapping[str, Any]) -> bool:
    got = served[label]
    if label == "chunk":
        div = int(served.get("chunk_divisor") or 1)
        return all(got in (int(w), int(w) // div) for w in want)
    if label == "backend":
        return all(str(w) == str(got) for w in want)
    return str(got) == str(want)


def check_target(settings: Settings, url: str, *, timeout_s: float = 10.0) -> TargetCheck:
    """Ask the server at ``url`` what it runs and compare the run's given labels with it."""
    reader = _READERS.get(settings.engine)
    labels = given_labels(settings)
    if reader is None:
        why = f"no verification is defined for engine {settings.engine}"
        return TargetCheck(url, settings.engine, {}, (), tuple((k, why) for k in labels), ())
    served, missing = reader(url, timeout_s)
    verified: list[str] = []
    unverified: list[tuple[str, str]] = []
    contradictions: list[str] = []
    for label, want in labels.items():
        if label not in served:
            unverified.append((label, missing.get(label, "the server does not report it")))
        elif _matches(label, want, served):
            verified.append(label)
        else:
            shown = ",".join(map(str, want)) if isinstance(want, list) else want
            contradictions.append(
                f"{label}: the run's label is {shown}, but the server at {url} serves {served[label]} "
                f"({served.get('source') or '/'.join(served.get('sources') or ())})"
            )
    return TargetCheck(url, settings.engine, served, tuple(verified), tuple(unverified), tuple(contradictions))
