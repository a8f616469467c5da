"""Verify an already running server (``--target-url`` / ``--sskj-deployment``) instead of trusting its labels.

:func:`check_target` asks the server what it runs and compares every label the run was given (``backend``,
``chunk``, the layout ``tp``/``ep``/``dp``/``pp``, ``model_path``) with it:

What each engine reports is its ``Engine.served_labels`` (:mod:`pytest_sskj.engines`):

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
    sizes = {"tp": settings.tp, "ep": settings.ep, "dp": settings.dp, "pp": settings.pp}
    out.update({k: v for k, v in sizes.items() if src.get(k) in _GIVEN})
    if settings.model_path and src.get("model_path") in _GIVEN:
        out["model_path"] = settings.model_path
    return out


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
    from pytest_sskj.engines import get_engine

    labels = given_labels(settings)
    served, missing = get_engine(settings.engine).served_labels(url, timeout_s)
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
