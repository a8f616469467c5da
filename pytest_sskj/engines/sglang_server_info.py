"""What an SGLang server reports about itself and how a launched server is verified against its spec: ``/server_info``
(the *effective* ``ServerArgs`` after SGLang's own post-processing, domain.md §8), the values a spec must resolve
to (:func:`expected_server_info`) and every disagreement (:func:`verify_server_info`).  Part of the SGLang engine
(:mod:`pytest_sskj.engines.sglang` re-exports it); no engine class here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sskj.spec import ServerSpec

__all__ = [
    "SERVER_INFO_PATHS",
    "attention_dp",
    "expected_server_info",
    "fetch_server_info",
    "flag_value",
    "resolved_algorithm",
    "verify_server_info",
]

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


def attention_dp(spec: ServerSpec) -> bool:
    """Multi-node data parallel (one server over several nodes) is attention DP: the only kind SGLang supports."""
    return spec.dp > 1 and spec.nnodes > 1 and spec.placement == "ranks"


def fetch_server_info(url: str, timeout_s: float = 10.0) -> dict[str, Any] | None:
    """The JSON object of ``/server_info`` (then ``/get_server_info``) at base ``url``; ``None`` if neither answers.

    ``None`` means "this server has no server info" (404/405 on both paths, or not a JSON object), or
    it did not answer at all; callers decide whether that is acceptable.
    """
    import httpx

    from pytest_sskj.httpopts import client_options

    base = url.rstrip("/")
    for path in SERVER_INFO_PATHS:
        try:
            r = httpx.get(base + path, timeout=timeout_s, **client_options(base))
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


def _reports_attn_dp(info: Mapping[str, Any] | None) -> bool:
    """Whether the server reports ``attn_dp_size`` (sglang >= 0.5.23; older versions report DP attention as
    ``dp_size=N, enable_dp_attention=true``)."""
    return info is not None and isinstance(info.get("attn_dp_size"), int)


def _dp_expectations(spec: ServerSpec, info: Mapping[str, Any] | None) -> dict[str, Any]:
    if not attention_dp(spec):
        return {"dp_size": spec.dp, **({"attn_dp_size": 1} if _reports_attn_dp(info) else {})}
    if info is None or _reports_attn_dp(info):
        return {"dp_size": 1, "attn_dp_size": spec.dp}  # 0.5.23 rewrites the request so
    return {"dp_size": spec.dp, "enable_dp_attention": True}


def expected_server_info(spec: ServerSpec, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``ServerArgs`` values a server launched from ``spec`` must report, as the sglang that reports ``info``
    resolves them (``None``: as the pinned 0.5.23 does).  ``chunked_prefill_size`` is the requested chunk; the
    DP-attention division is applied by :func:`verify_server_info`."""
    ranks = spec.placement == "ranks"
    exp: dict[str, Any] = {
        "tp_size": spec.tp,
        "ep_size": spec.ep,
        **_dp_expectations(spec, info),
        "pp_size": spec.pp,
        "disable_radix_cache": spec.disable_radix_cache,
        "nnodes": spec.nnodes if ranks else 1,
        "node_rank": 0,
    }
    if spec.backend != "auto":
        exp["moe_runner_backend"] = spec.backend
    if spec.chunk is not None:
        exp["chunked_prefill_size"] = spec.chunk
    algo = flag_value(spec.extra_args, "--speculative-algorithm")
    if algo is not None:
        exp["speculative_algorithm"] = resolved_algorithm(algo)
    return exp


def resolved_algorithm(name: str) -> str:
    """The ``speculative_algorithm`` sglang reports for ``--speculative-algorithm name``: the name resolved
    case-insensitively, NEXTN as EAGLE (``spec_registry.py``)."""
    return "EAGLE" if name.upper() == "NEXTN" else name.upper()


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The last value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``), as argparse takes it."""
    found = None
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def _chunk_divisor(info: Mapping[str, Any]) -> tuple[int, str]:
    """What SGLang divides the chunk by with DP attention (``_handle_data_parallelism``), and its name."""
    if _reports_attn_dp(info):
        return int(info["attn_dp_size"]), "attn_dp_size"
    dp = info.get("dp_size")
    if info.get("enable_dp_attention") and isinstance(dp, int) and dp > 1:
        return dp, "dp_size"
    return 1, "dp_size"


def _show(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_MISSING = object()


def _check_chunk(want: int, got: Any, info: Mapping[str, Any]) -> str | None:
    key = "chunked_prefill_size"
    div, name = _chunk_divisor(info)
    eff = want // div
    if got is _MISSING:
        return f"{key}: spec {want}, server does not report {key}"
    if got != eff:
        note = f" (expected {eff} = {want} // {name} {div} with DP attention)" if eff != want else ""
        return f"{key}: spec {want}, server reports {_show(got)}{note}"
    return None


def verify_server_info(spec: ServerSpec, info: Mapping[str, Any]) -> list[str]:
    """Every disagreement between ``spec`` and a server's ``/server_info``, one sentence each (empty: all match).

    Checked: ``moe_runner_backend`` (unless the spec asks for ``auto``), ``chunked_prefill_size``
    (when the spec sets one; DP attention's division accounted for), ``tp_size``, ``ep_size``,
    ``dp_size`` and ``attn_dp_size`` (multi-node DP is attention DP: 0.5.23 reports ``dp_size=1,
    attn_dp_size=N``, older versions ``dp_size=N, enable_dp_attention=true``), ``pp_size``,
    ``disable_radix_cache``, ``nnodes``, ``node_rank`` (the serving rank must be 0) and ``speculative_algorithm``
    (a speculative arm; NEXTN is EAGLE).  A field the server does not report is a mismatch too: it cannot be
    confirmed.
    """
    out: list[str] = []
    for key, want in expected_server_info(spec, info).items():
        got = info.get(key, _MISSING)
        if key == "chunked_prefill_size" and isinstance(want, int):
            problem = _check_chunk(want, got, info)
            if problem:
                out.append(problem)
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
