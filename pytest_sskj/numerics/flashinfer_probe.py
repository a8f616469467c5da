"""FlashInfer capability detection for the Kimi-K3 SM120 MoE path, and the skip reasons of the kernel tests.

This module owns the question "can this FlashInfer run Kimi-K3's SiTU MoE through CUTLASS?" (domain.md §5.6,
§12.3): ``ActivationType.Situ`` exists since 0.6.17 for TRTLLM-Gen only, so the enum proves nothing; CUTLASS
SiTU (#4460, first on PyPI in 0.7.0rc3 / 0.7.0) is detected by the keyword-only ``situ_beta`` and
``situ_linear_beta`` parameters of ``flashinfer.fused_moe.cutlass_fused_moe``. ``probe_flashinfer`` records
version and build commit (``flashinfer._build_meta``) for the report; ``require_cutlass_situ`` raises
:class:`FlashInferApiMissing` with what is missing and how to fix it. It also decides the GPU skip reasons
(SM100+ for the MX quantizer kernels, which return uninitialized memory on SM90 without an error; SM120 +
CUTLASS SiTU for the fused MoE). flashinfer and torch are imported lazily, inside functions.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

from pytest_sskj.errors import SskjError

__all__ = [
    "MIN_FLASHINFER_FOR_CUTLASS_SITU",
    "REASON_NEEDS_SM100",
    "REASON_NEEDS_SM120_SITU",
    "REASON_NO_FLASHINFER",
    "FlashInferApiMissing",
    "FlashInferInfo",
    "cuda_capability",
    "cutlass_situ_kwargs",
    "cutlass_situ_skip_reason",
    "probe_flashinfer",
    "quantizer_skip_reason",
    "require_cutlass_situ",
]

MIN_FLASHINFER_FOR_CUTLASS_SITU = "0.7.0"
REASON_NO_FLASHINFER = "flashinfer not importable"
REASON_NEEDS_SM100 = "needs SM100+ (FlashInfer MX quantizer kernels do not run on sm90: outputs are uninitialized)"
REASON_NEEDS_SM120_SITU = "needs sm120 + FlashInfer CUTLASS SiTU (situ_beta)"
_SITU_KWARGS = ("situ_beta", "situ_linear_beta")


class FlashInferApiMissing(SskjError, RuntimeError):
    """The installed FlashInfer lacks an API the Kimi-K3 SM120 path needs."""


@dataclass(frozen=True)
class FlashInferInfo:
    """What the installed FlashInfer offers (all False / None when it cannot be imported)."""

    importable: bool
    version: str | None = None
    git_commit: str | None = None
    has_cutlass_fused_moe: bool = False
    has_cutlass_situ: bool = False
    has_situ_enum: bool = False
    has_mxfp8_quantize: bool = False
    has_mxfp4_quantize: bool = False
    has_host_decoders: bool = False
    missing: tuple[str, ...] = field(default_factory=tuple)
    import_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _import(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _accepts_keywords(func: Any, names: tuple[str, ...]) -> bool:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return False  # **kwargs proves nothing about SiTU support
    return all(n in params for n in names)


def probe_flashinfer(module: ModuleType | None = None, fused_moe: ModuleType | None = None) -> FlashInferInfo:
    """Inspect FlashInfer (``module`` / ``fused_moe`` may be given, e.g. test doubles) without running kernels."""
    if module is None:
        try:
            module = importlib.import_module("flashinfer")
        except Exception as exc:
            return FlashInferInfo(importable=False, import_error=f"{type(exc).__name__}: {exc}")
    build_meta = getattr(module, "_build_meta", None) or _import(f"{module.__name__}._build_meta")
    version = getattr(build_meta, "__version__", None) or getattr(module, "__version__", None)
    commit = getattr(build_meta, "__git_commit__", None)
    if fused_moe is None:
        fused_moe = getattr(module, "fused_moe", None) or _import(f"{module.__name__}.fused_moe")
    cfm = getattr(fused_moe, "cutlass_fused_moe", None) if fused_moe is not None else None
    act = getattr(fused_moe, "ActivationType", None) if fused_moe is not None else None
    has_situ = cfm is not None and _accepts_keywords(cfm, _SITU_KWARGS)
    missing: list[str] = []
    if cfm is None:
        missing.append("flashinfer.fused_moe.cutlass_fused_moe")
    elif not has_situ:
        missing.append("cutlass_fused_moe(*, situ_beta=..., situ_linear_beta=...)")
    if act is None or not hasattr(act, "Situ"):
        missing.append("flashinfer.fused_moe.ActivationType.Situ")
    decoders = all(hasattr(module, n) for n in ("mxfp8_dequantize_host", "mxfp4_dequantize_host", "mxfp4_dequantize"))
    return FlashInferInfo(
        importable=True,
        version=str(version) if version is not None else None,
        git_commit=str(commit) if commit is not None else None,
        has_cutlass_fused_moe=cfm is not None,
        has_cutlass_situ=has_situ,
        has_situ_enum=act is not None and hasattr(act, "Situ"),
        has_mxfp8_quantize=hasattr(module, "mxfp8_quantize"),
        has_mxfp4_quantize=hasattr(module, "mxfp4_quantize"),
        has_host_decoders=decoders,
        missing=tuple(missing),
    )


def require_cutlass_situ(module: ModuleType | None = None, fused_moe: ModuleType | None = None) -> FlashInferInfo:
    """Return the probe, or raise :class:`FlashInferApiMissing` saying what is missing and how to fix it."""
    info = probe_flashinfer(module, fused_moe)
    if not info.importable:
        raise FlashInferApiMissing(
            f"FlashInfer cannot be imported ({info.import_error}); install flashinfer-python>="
            f"{MIN_FLASHINFER_FOR_CUTLASS_SITU} (with matching flashinfer-cubin / flashinfer-jit-cache) to run "
            "Kimi-K3 with --moe-runner-backend flashinfer_mxfp4 on SM120"
        )
    if not (info.has_cutlass_situ and info.has_situ_enum):
        raise FlashInferApiMissing(
            f"FlashInfer {info.version} (commit {info.git_commit}) has no CUTLASS SiTU MoE: missing "
            f"{', '.join(info.missing)}. Kimi-K3 needs ActivationType.Situ with situ_beta / situ_linear_beta in "
            f"cutlass_fused_moe (flashinfer PR #4460, first released in flashinfer-python "
            f"{MIN_FLASHINFER_FOR_CUTLASS_SITU}); upgrade FlashInfer. Do not pass Swiglu with swiglu_* instead: "
            "FlashInfer silently turns that into SwigluBias (wrong numerics, no error)."
        )
    return info


def cutlass_situ_kwargs(
    experts_local: int,
    beta: float = 4.0,
    linear_beta: float = 25.0,
    *,
    device: Any = "cuda",
    module: ModuleType | None = None,
    fused_moe: ModuleType | None = None,
) -> dict[str, Any]:
    """Keyword arguments selecting SiTU in ``cutlass_fused_moe``: activation type + per-expert fp32 tensors.

    Raises :class:`FlashInferApiMissing` (before any tensor is made) when the API is absent.
    """
    require_cutlass_situ(module, fused_moe)
    import torch

    fm = fused_moe if fused_moe is not None else importlib.import_module("flashinfer.fused_moe")
    return {
        "activation_type": fm.ActivationType.Situ,
        "situ_beta": torch.full((experts_local,), float(beta), dtype=torch.float32, device=device),
        "situ_linear_beta": torch.full((experts_local,), float(linear_beta), dtype=torch.float32, device=device),
    }


def cuda_capability() -> tuple[int, int] | None:
    """Compute capability of the current CUDA device, or None without torch/CUDA."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return int(major), int(minor)


def _where() -> str:
    cap = cuda_capability()
    return "no CUDA device" if cap is None else f"this GPU is sm{cap[0]}{cap[1]}"


def quantizer_skip_reason() -> str | None:
    """Why the FlashInfer MX quantizer bit-exact tests cannot run here, or None when they can."""
    cap = cuda_capability()
    if cap is None or cap[0] < 10:
        return f"{REASON_NEEDS_SM100}; {_where()}"
    if not probe_flashinfer().importable:
        return REASON_NO_FLASHINFER
    return None


def cutlass_situ_skip_reason() -> str | None:
    """Why the SM120 CUTLASS SiTU fused-MoE tests cannot run here, or None when they can."""
    cap = cuda_capability()
    if cap is None or cap[0] != 12:
        return f"{REASON_NEEDS_SM120_SITU}; {_where()}"
    info = probe_flashinfer()
    if not info.importable:
        return f"{REASON_NEEDS_SM120_SITU}; {REASON_NO_FLASHINFER}"
    if not info.has_cutlass_situ:
        return f"{REASON_NEEDS_SM120_SITU}; FlashInfer {info.version} lacks it"
    return None
