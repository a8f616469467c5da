"""``/server_info``: read what a running SGLang server says it runs, and compare it with the launched spec.

SGLang's rank 0 answers ``GET /server_info`` (``/get_server_info`` on older versions; domain.md §8.3)
with every ``ServerArgs`` field after its own post-processing, plus scheduler info and ``version``.
That is the *effective* configuration: SGLang may rewrite what was asked (``--enable-dp-attention``
divides ``chunked_prefill_size`` by ``dp_size``; a backend can be overridden).  :func:`verify_server_info`
turns each disagreement with the :class:`~pytest_sskj.server.spec.ServerSpec` into one sentence,
``"moe_runner_backend: spec flashinfer_mxfp4, server reports marlin"``, so an A/B comparison never
silently measures the wrong backend or chunk size.
"""

from __future__ import annotations

from typing import Any

from pytest_sskj.server.spec import ServerSpec

__all__ = ["SERVER_INFO_PATHS", "expected_server_info", "fetch_server_info", "verify_server_info"]

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")

_MISSING = object()


def fetch_server_info(url: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The JSON object of ``/server_info`` (then ``/get_server_info``) at base ``url``; ``None`` if neither answers.

    ``None`` means "this server has no server info" (404/405 on both paths, or not a JSON object), or
    it did not answer at all; callers decide whether that is acceptable for the engine.
    """
    import httpx

    base = url.rstrip("/")
    for path in SERVER_INFO_PATHS:
        try:
            r = httpx.get(base + path, timeout=timeout_s, trust_env=False)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            continue
        try:
            data = r.json()
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


def expected_server_info(spec: ServerSpec) -> dict[str, Any]:
    """The ``ServerArgs`` values a server launched from ``spec`` must report (before SGLang's rewrites)."""
    ranks = spec.placement == "ranks"
    exp: dict[str, Any] = {
        "tp_size": spec.tp,
        "ep_size": spec.ep,
        "dp_size": spec.dp,
        "pp_size": spec.pp,
        "disable_radix_cache": spec.disable_radix_cache,
        "nnodes": spec.nnodes if ranks else 1,
        "node_rank": 0,
    }
    if spec.backend != "auto":
        exp["moe_runner_backend"] = spec.backend
    if spec.chunk is not None:
        exp["chunked_prefill_size"] = spec.chunk
    return exp


def _effective_chunk(spec_chunk: int, info: dict[str, Any]) -> int:
    """SGLang divides the chunk by dp_size when DP attention is on (server_args ``_handle_data_parallelism``)."""
    dp = info.get("dp_size")
    if info.get("enable_dp_attention") and isinstance(dp, int) and dp > 1:
        return spec_chunk // dp
    return spec_chunk


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def verify_server_info(spec: ServerSpec, info: dict[str, Any]) -> list[str]:
    """Every disagreement between ``spec`` and a server's ``/server_info``, one sentence each (empty: all match).

    Checked: ``moe_runner_backend`` (unless the spec asks for ``auto``), ``chunked_prefill_size``
    (when the spec sets one; DP attention's division accounted for), ``tp_size``, ``ep_size``,
    ``dp_size``, ``pp_size``, ``disable_radix_cache``, ``nnodes`` and ``node_rank`` (the serving rank
    must be 0).  A field the server does not report is a mismatch too: it cannot be confirmed.
    """
    out: list[str] = []
    for key, want in expected_server_info(spec).items():
        got = info.get(key, _MISSING)
        if key == "chunked_prefill_size" and isinstance(want, int):
            eff = _effective_chunk(want, info)
            if got is _MISSING:
                out.append(f"{key}: spec {want}, server does not report {key}")
            elif got != eff:
                note = (
                    f" (expected {eff} = {want} // dp_size {info.get('dp_size')} with DP attention)"
                    if eff != want
                    else ""
                )
                out.append(f"{key}: spec {want}, server reports {_show(got)}{note}")
            continue
        if got is _MISSING:
            if key == "ep_size" and want == 1:
                continue  # SGLang versions without expert parallelism report no ep_size
            out.append(f"{key}: spec {_show(want)}, server does not report {key}")
        elif isinstance(want, bool):
            if got is not want:
                out.append(f"{key}: spec {_show(want)}, server reports {_show(got)}")
        elif got != want:
            out.append(f"{key}: spec {_show(want)}, server reports {_show(got)}")
    return out
