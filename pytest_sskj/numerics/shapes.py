"""Kimi-K3 MoE constants and the per-rank expert tensor shapes SGLang builds for a TP/EP layout.

This module owns the arithmetic of domain.md §2.1/§2.5: ``moe_ep = ep``, ``moe_tp = tp / ep / moe_dp``,
``E_local = 896 / ep``, ``I_r = 3072 / moe_tp``; the checkpoint layout ``[out, in/2]`` packed FP4 and
``[out, in/32]`` E8M0 scales per expert, ``w13 = [gate; up]`` stacked along rows. It has no torch import.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "KIMI_K3",
    "KimiK3Config",
    "RankShapes",
    "kimi_k3_rank_shapes",
]


@dataclass(frozen=True)
class KimiK3Config:
    """Model constants of Kimi-K3 that the MoE kernels see ([K3CFG], domain.md §2.1)."""

    hidden_size: int = 7168
    latent_size: int = 3584  # routed_expert_hidden_size: K of GEMM1, N of GEMM2
    moe_intermediate_size: int = 3072
    num_experts: int = 896
    top_k: int = 16
    num_shared_experts: int = 2
    moe_layers: int = 92
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    routed_scaling_factor: float = 1.0
    block_size: int = 32


KIMI_K3 = KimiK3Config()


@dataclass(frozen=True)
class RankShapes:
    """Per-rank routed-expert tensors (uint8) for one MoE layer."""

    tp: int
    ep: int
    moe_tp: int
    experts_local: int
    inter_local: int
    hidden: int
    w13: tuple[int, int, int]
    w13_scale: tuple[int, int, int]
    w2: tuple[int, int, int]
    w2_scale: tuple[int, int, int]

    @property
    def bytes_per_layer(self) -> int:
        total = 0
        for shape in (self.w13, self.w13_scale, self.w2, self.w2_scale):
            total += shape[0] * shape[1] * shape[2]
        return total

    def bytes_per_gpu(self, layers: int = KIMI_K3.moe_layers) -> int:
        """Routed-expert weight bytes on one GPU over all MoE layers (≈45.2 GB for TP32/EP4 and TP32/EP32)."""
        return self.bytes_per_layer * layers

    @property
    def needs_padding(self) -> bool:
        """FlashInfer MXFP4 needs hidden and intermediate divisible by 128 (else SGLang pads)."""
        return self.hidden % 128 != 0 or self.inter_local % 128 != 0


def kimi_k3_rank_shapes(tp: int, ep: int, moe_dp: int = 1, cfg: KimiK3Config = KIMI_K3) -> RankShapes:
    """Per-rank shapes for ``--tp-size tp --ep-size ep`` (e.g. 32/4 → 224 experts, I_r 384)."""
    if tp <= 0 or ep <= 0 or moe_dp <= 0:
        raise ValueError(f"tp, ep and moe_dp must be positive, got tp={tp} ep={ep} moe_dp={moe_dp}")
    if tp % (ep * moe_dp):
        raise ValueError(f"tp={tp} is not divisible by ep*moe_dp={ep * moe_dp} (moe_tp = tp / ep / moe_dp)")
    moe_tp = tp // ep // moe_dp
    if cfg.num_experts % ep:
        raise ValueError(f"{cfg.num_experts} experts cannot be split evenly over ep={ep}")
    if cfg.moe_intermediate_size % moe_tp:
        raise ValueError(f"moe_intermediate_size {cfg.moe_intermediate_size} is not divisible by moe_tp={moe_tp}")
    e_local = cfg.num_experts // ep
    inter = cfg.moe_intermediate_size // moe_tp
    h = cfg.latent_size
    bs = cfg.block_size
    return RankShapes(
        tp=tp,
        ep=ep,
        moe_tp=moe_tp,
        experts_local=e_local,
        inter_local=inter,
        hidden=h,
        w13=(e_local, 2 * inter, h // 2),
        w13_scale=(e_local, 2 * inter, h // bs),
        w2=(e_local, h, inter // 2),
        w2_scale=(e_local, h, inter // bs),
    )
