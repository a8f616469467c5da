"""The FlashInfer SM120 CUTLASS MXFP8 x MXFP4 fused-MoE call for Kimi-K3, as the kernel tests drive it.

This module owns the plumbing of domain.md §5.2 / §6: Kimi weights are relaid out once
(:func:`prepare_cutlass_weights`: ``[gate; up]`` → ``[up; gate]``, padding, 128x4 scale swizzle), the input
is made contiguous only when it is a strided view (the chunked-prefill bug of §6.4), MXFP8-quantized with
``flashinfer.mxfp8_quantize`` (RCEIL, swizzled scales) and passed with ``use_mxfp8_act_scaling=True``,
``activation_type=Situ`` and per-expert ``situ_beta`` / ``situ_linear_beta`` tensors; global expert ids go
in unchanged with ``ep_size`` / ``ep_rank``. The capability probe runs first, so a FlashInfer without
CUTLASS SiTU fails with :class:`~pytest_sskj.numerics.flashinfer_probe.FlashInferApiMissing` instead of
silently computing another activation. flashinfer is imported lazily.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pytest_sskj.numerics.flashinfer_probe import require_cutlass_situ
from pytest_sskj.numerics.moe import MoeWeights
from pytest_sskj.numerics.relayout import CutlassW2, CutlassW13, kimi_w2_to_cutlass, kimi_w13_to_cutlass

__all__ = ["CutlassMoeWeights", "flashinfer_cutlass_moe", "prepare_cutlass_weights"]


@dataclass(frozen=True)
class CutlassMoeWeights:
    """Relaid-out weights plus the int64 / int32 views the kernel takes."""

    w13: CutlassW13
    w2: CutlassW2
    experts_local: int

    @property
    def fc1(self) -> torch.Tensor:
        return self.w13.weight.view(torch.int64)

    @property
    def fc2(self) -> torch.Tensor:
        return self.w2.weight.view(torch.int64)

    def quant_scales(self) -> list[torch.Tensor]:
        """``[fc1 block scales int32, fc1 global fp32 ones, fc2 block scales int32, fc2 global fp32 ones]``."""
        ones = torch.ones(self.experts_local, dtype=torch.float32, device=self.w13.weight.device)
        return [self.w13.scale.view(torch.int32), ones, self.w2.scale.view(torch.int32), ones]


def prepare_cutlass_weights(weights: MoeWeights) -> CutlassMoeWeights:
    """Relayout one rank's Kimi weights for ``cutlass_fused_moe`` (done once, like SGLang's post-load step)."""
    return CutlassMoeWeights(
        w13=kimi_w13_to_cutlass(weights.w13, weights.w13_scale),
        w2=kimi_w2_to_cutlass(weights.w2, weights.w2_scale),
        experts_local=weights.num_experts,
    )


def _per_expert(value: float | torch.Tensor, n: int, device: torch.device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=torch.float32).contiguous()
    return torch.full((n,), float(value), dtype=torch.float32, device=device)


def flashinfer_cutlass_moe(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    prepared: CutlassMoeWeights,
    *,
    ep_rank: int = 0,
    ep_size: int = 1,
    situ_beta: float | torch.Tensor = 4.0,
    situ_linear_beta: float | torch.Tensor = 25.0,
    use_fused_finalize: bool = False,
    **extra: Any,
) -> torch.Tensor:
    """This rank's Kimi-K3 MoE output ``[T, H]`` bf16 from FlashInfer's CUTLASS kernel (SM100+/SM120 only).

    ``use_fused_finalize=False`` selects FlashInfer's deterministic finalize (bitwise repeatable).
    """
    require_cutlass_situ()
    import flashinfer
    from flashinfer.fused_moe import ActivationType, cutlass_fused_moe

    if not x.is_contiguous():
        x = x.contiguous()  # mxfp8_quantize rejects strided views ("input must be contiguous")
    xq, xsf = flashinfer.mxfp8_quantize(x.to(torch.bfloat16), is_sf_swizzled_layout=True, alignment=32)
    n = prepared.experts_local
    result = cutlass_fused_moe(
        xq,
        topk_ids.to(torch.int32).contiguous(),
        topk_weights.to(torch.float32).contiguous(),
        prepared.fc1,
        prepared.fc2,
        torch.bfloat16,
        quant_scales=prepared.quant_scales(),
        input_sf=xsf,
        ep_size=ep_size,
        ep_rank=ep_rank,
        use_mxfp8_act_scaling=True,
        activation_type=ActivationType.Situ,
        use_fused_finalize=use_fused_finalize,
        situ_beta=_per_expert(situ_beta, n, x.device),
        situ_linear_beta=_per_expert(situ_linear_beta, n, x.device),
        **extra,
    )
    # some FlashInfer versions return [output, <min-latency metadata>...]
    out: torch.Tensor = result[0] if isinstance(result, (list, tuple)) else result
    return out
