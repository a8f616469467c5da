"""Kimi-K3 per-rank routed-expert shapes (domain.md §2.5)."""

from __future__ import annotations

import pytest

from pytest_sskj.numerics.shapes import KIMI_K3, kimi_k3_rank_shapes


def test_tp32_ep4_rank() -> None:
    s = kimi_k3_rank_shapes(tp=32, ep=4)
    assert (s.moe_tp, s.experts_local, s.inter_local, s.hidden) == (8, 224, 384, 3584)
    assert (s.w13, s.w13_scale, s.w2, s.w2_scale) == (
        (224, 768, 1792), (224, 768, 112), (224, 3584, 192), (224, 3584, 12),
    )  # fmt: skip
    assert round(s.bytes_per_gpu() / 1e9, 1) == 45.2, f"{s.bytes_per_gpu()} bytes over 92 MoE layers"
    assert not s.needs_padding


def test_tp32_ep32_rank() -> None:
    s = kimi_k3_rank_shapes(tp=32, ep=32)
    assert (s.moe_tp, s.experts_local, s.inter_local) == (1, 28, 3072)
    assert (s.w13, s.w13_scale, s.w2, s.w2_scale) == (
        (28, 6144, 1792), (28, 6144, 112), (28, 3584, 1536), (28, 3584, 96),
    )  # fmt: skip
    assert round(s.bytes_per_gpu() / 1e9, 1) == 45.2
    assert not s.needs_padding


def test_tp16_style_slice_needs_padding() -> None:
    s = kimi_k3_rank_shapes(tp=16, ep=1)
    assert s.inter_local == 192 and s.needs_padding, "I_r = 192 is not a multiple of 128"


def test_constants_and_invalid_layouts() -> None:
    assert (KIMI_K3.num_experts, KIMI_K3.top_k, KIMI_K3.latent_size, KIMI_K3.moe_intermediate_size) == (
        896,
        16,
        3584,
        3072,
    )
    with pytest.raises(ValueError, match="not divisible by ep"):
        kimi_k3_rank_shapes(tp=32, ep=3)
    with pytest.raises(ValueError, match="cannot be split evenly"):
        kimi_k3_rank_shapes(tp=3, ep=3)
    with pytest.raises(ValueError, match="must be positive"):
        kimi_k3_rank_shapes(tp=0, ep=1)
