"""Kimi ``[gate; up]`` → CUTLASS ``[up; gate]`` relayout of w13 / w2: byte equality, negative control, inverse."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.errors import NumericsMismatch  # noqa: E402
from pytest_sskj.numerics.compare import assert_bitwise_equal  # noqa: E402
from pytest_sskj.numerics.moe import dequantize_fp4  # noqa: E402
from pytest_sskj.numerics.relayout import (  # noqa: E402
    CutlassW13,
    cutlass_w2_to_kimi,
    cutlass_w13_to_kimi,
    kimi_w2_to_cutlass,
    kimi_w13_to_cutlass,
    swap_halves,
)
from pytest_sskj.numerics.situ import situ  # noqa: E402
from pytest_sskj.numerics.swizzle import swizzle_128x4, unswizzle_128x4  # noqa: E402


def asymmetric_w13(experts: int, inter: int, hidden: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """gate (w1) rows use bytes 0..127 and scales 100..109; up (w3) rows bytes 128..255 and scales 120..129."""
    g = torch.Generator().manual_seed(seed)
    gate = torch.randint(0, 128, (experts, inter, hidden // 2), generator=g, dtype=torch.uint8)
    up = torch.randint(128, 256, (experts, inter, hidden // 2), generator=g, dtype=torch.uint8)
    sg = torch.randint(100, 110, (experts, inter, hidden // 32), generator=g, dtype=torch.uint8)
    su = torch.randint(120, 130, (experts, inter, hidden // 32), generator=g, dtype=torch.uint8)
    return torch.cat([gate, up], 1), torch.cat([sg, su], 1)


def unswapped(weight: torch.Tensor, scale: torch.Tensor) -> CutlassW13:
    """What a relayout that forgets the swap would produce (the GPT-OSS mistake on Kimi weights)."""
    swapped = kimi_w13_to_cutlass(swap_halves(weight), swap_halves(scale))
    return swapped


def test_kimi_size_expert_bytes_equal_the_sglang_recipe() -> None:
    w, s = asymmetric_w13(2, 384, 3584)  # TP32/EP4 I_r and the latent H: no padding
    out = kimi_w13_to_cutlass(w, s)
    # SGLang: reorder_w1w3_to_w3w1 (cat [w3, w1] along rows) then block_scale_interleave per expert
    assert_bitwise_equal(out.weight, torch.cat([w[:, 384:], w[:, :384]], 1), what="w13 bytes")
    assert_bitwise_equal(out.scale, swizzle_128x4(torch.cat([s[:, 384:], s[:, :384]], 1)), what="w13 scales")
    assert tuple(out.scale.shape) == (2, 768, 112) and out.scale.view(torch.int32).shape[-1] == 3584 // 128


def test_unswapped_layout_fails_byte_equality() -> None:
    w, s = asymmetric_w13(2, 384, 3584)
    expected = kimi_w13_to_cutlass(w, s)
    wrong = unswapped(w, s)
    with pytest.raises(NumericsMismatch, match="bytes differ"):
        assert_bitwise_equal(wrong.weight, expected.weight, what="unswapped w13")
    with pytest.raises(NumericsMismatch, match="bytes differ"):
        assert_bitwise_equal(wrong.scale, expected.scale, what="unswapped scales")


def test_cutlass_reading_of_the_relayout_computes_kimi_situ() -> None:
    """Read FC1 the way CUTLASS does (linear = rows [0, I), gate = rows [I_p, I_p + I)) and compare activations."""
    inter, hidden = 64, 128
    w, s = asymmetric_w13(1, inter, hidden, seed=3)
    x = torch.randn(5, hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    dense = dequantize_fp4(w[0], s[0]).double()
    reference = situ(x @ dense[:inter].T, x @ dense[inter:].T)  # Kimi: first half gate, second half up

    def cutlass_act(layout: CutlassW13) -> torch.Tensor:
        scales = unswizzle_128x4(layout.scale[0], layout.weight.shape[1], hidden // 32)
        fc1 = x @ dequantize_fp4(layout.weight[0], scales).double().T
        ip = layout.weight.shape[1] // 2
        return situ(fc1[:, ip : ip + inter], fc1[:, :inter])

    assert torch.allclose(cutlass_act(kimi_w13_to_cutlass(w, s)), reference, rtol=1e-12, atol=1e-14)
    assert not torch.allclose(cutlass_act(unswapped(w, s)), reference, rtol=1e-2), "unswapped halves went unnoticed"


def test_padding_and_exact_inverse() -> None:
    w, s = asymmetric_w13(3, 192, 320, seed=5)  # I 192 -> 256, H 320 -> 384
    out = kimi_w13_to_cutlass(w, s)
    assert tuple(out.weight.shape) == (3, 512, 192) and tuple(out.scale.shape) == (3, 512, 12)
    assert int(out.weight[:, 192:256].sum()) == 0 and int(out.weight[:, :, 160:].sum()) == 0, "padding not zero"
    back_w, back_s = cutlass_w13_to_kimi(out)
    assert_bitwise_equal(back_w, w, what="inverse w13 bytes")
    assert_bitwise_equal(back_s, s, what="inverse w13 scales")


def test_packed_rows_are_moved_not_rewritten() -> None:
    w, s = asymmetric_w13(1, 128, 256, seed=6)
    out = kimi_w13_to_cutlass(w, s)
    for r in (0, 5, 127):
        assert torch.equal(out.weight[0, r], w[0, 128 + r]), f"up row {r} bytes changed"
        assert torch.equal(out.weight[0, 128 + r], w[0, r]), f"gate row {r} bytes changed"


def test_w2_padding_swizzle_and_inverse() -> None:
    g = torch.Generator().manual_seed(7)
    w2 = torch.randint(0, 256, (2, 320, 96), generator=g, dtype=torch.uint8)  # H 320, I 192
    s2 = torch.randint(110, 130, (2, 320, 6), generator=g, dtype=torch.uint8)
    out = kimi_w2_to_cutlass(w2, s2)
    assert tuple(out.weight.shape) == (2, 384, 128) and tuple(out.scale.shape) == (2, 384, 8)
    padded = torch.zeros((2, 384, 8), dtype=torch.uint8)
    padded[:, :320, :6] = s2
    assert_bitwise_equal(out.scale, swizzle_128x4(padded), what="w2 scales")
    back_w, back_s = cutlass_w2_to_kimi(out)
    assert torch.equal(back_w, w2) and torch.equal(back_s, s2)


def test_shape_errors_say_what_is_wrong() -> None:
    w, s = asymmetric_w13(1, 64, 128)
    with pytest.raises(ValueError, match="does not match weight"):
        kimi_w13_to_cutlass(w, s[:, :, :2])
    with pytest.raises(TypeError, match="uint8"):
        kimi_w13_to_cutlass(w.to(torch.int16), s)
