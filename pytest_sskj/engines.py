"""What each serving engine accepts and the defaults it brings to the matrix.

The table is data: the option layer validates ``--backend`` against ``EngineInfo.backends`` and
fills unset shape settings from ``EngineInfo.defaults`` (the last step of the precedence chain,
after CLI, ``SSKJ_*``, ``sskj_*`` ini keys and the profile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pytest_sskj.slo import parse_slo

__all__ = ["ENGINES", "EngineInfo", "engine_info"]


@dataclass(frozen=True)
class EngineInfo:
    """Static facts about one engine kind."""

    name: str
    backends: tuple[str, ...]
    """Backend names the engine understands (``--backend`` is checked against these)."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Default settings for this engine (shape, matrix, endpoint, port)."""
    description: str = ""


# SGLang --moe-runner-backend choices at the users' base commit (domain.md §8.1).
_SGLANG_BACKENDS = (
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
    "cutlass",
    "aiter",
    "marlin",
    "humming",
    "experimental_sgl_marlin",
    "hpc_ops",
    "megamoe",
)

ENGINES: Mapping[str, EngineInfo] = MappingProxyType(
    {
        "embedded": EngineInfo(
            name="embedded",
            backends=("parallel", "serial"),
            defaults=MappingProxyType(
                {
                    "backends": ("parallel", "serial"),
                    # A tiny model on a few shared CPU cores: which variant is faster depends on the machine's
                    # load (measured both ways), so the A/B verdict is recorded, not enforced, and the SLO is
                    # CPU-scale (the users' 3 s / 50 ms is a GPU SLO).  Override with --sskj-compare-expect
                    # better / --sskj-slo.
                    "compare_expect": "report",
                    "slo": parse_slo("ttft_p95_ms<30000,tpot_p95_ms<2000"),
                    # two chunk sizes and a doubling concurrency search, so that the default run exercises the
                    # chunk curve and the adaptive search on the real engine too (it stays well under 2 min)
                    "chunks": (256, 512),
                    "search": "double",
                    "search_max": 32,
                    "concurrencies": (8,),
                    "isl": 512,
                    "osl": 16,
                    "requests": 40,
                    "repeats": 3,
                    "endpoint": "completions",
                    "health_timeout_s": 60.0,
                    "stall_timeout_s": 30.0,  # = the CPU SLO's TTFT bound: a hang is told within 60 s
                    "port": 0,
                }
            ),
            description="llama.cpp's HTTP server on CPU (xllamacpp wheel) serving a tiny generated GGUF model",
        ),
        "sglang": EngineInfo(
            name="sglang",
            backends=_SGLANG_BACKENDS,
            defaults=MappingProxyType(
                {
                    "backends": ("marlin", "flashinfer_mxfp4"),
                    "chunks": (4096, 8192, 16384),
                    "concurrencies": (8, 16),
                    "isl": 16384,
                    "osl": 1,
                    "requests": 40,
                    "repeats": 3,
                    "endpoint": "generate",
                    "health_timeout_s": 1800.0,
                    "stall_timeout_s": 600.0,
                    "port": 30000,
                }
            ),
            description="python -m sglang.launch_server, one rank per node",
        ),
        "vllm": EngineInfo(
            name="vllm",
            backends=("auto", "marlin", "flashinfer_mxfp4", "triton"),
            defaults=MappingProxyType(
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
                    "port": 8000,
                }
            ),
            description="vllm serve (single node, or multi-node data parallel)",
        ),
    }
)


def engine_info(name: str) -> EngineInfo:
    """Return the :class:`EngineInfo` for ``name``; the error lists the known engines."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known engines: {', '.join(ENGINES)}") from None
