"""Kimi-K3 routed-expert weights → the FlashInfer SM120 CUTLASS MXFP4 layout, and back; byte-exact.

This module owns domain.md §6.2. Kimi loads ``w13`` as contiguous halves ``[gate (w1); up (w3)]`` along the
row (N) dimension; CUTLASS FC1 reads rows ``[up; gate]`` (``linear = FC1[:, 0:I]``, ``gate = FC1[:, I:2I]``).
The relayout swaps the halves of the packed FP4 bytes and of the E8M0 scales along dim 1 (packed bytes and
the K dimension untouched), pads each half to ``I_p = round_up(I, 128)`` rows and K to ``H_p =
round_up(H, 128)`` (zero bytes), then 128x4-swizzles the scales per expert. ``w2`` is padded and its scales
swizzled the same way. The inverse functions recover the loaded tensors exactly.

Bytes are moved as the widest machine words both sides allow (int64 for packed rows: ``H/2`` is a multiple of
16), zeros are written only when there is padding, and the scale swizzle is one tile permutation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pytest_sskj.numerics.swizzle import round_up, swizzle_128x4, unswizzle_128x4

__all__ = [
    "CutlassW2",
    "CutlassW13",
    "copy_bytes",
    "cutlass_w2_to_kimi",
    "cutlass_w13_to_kimi",
    "kimi_w2_to_cutlass",
    "kimi_w13_to_cutlass",
    "swap_halves",
]

ALIGN = 128
BLOCK = 32


@dataclass(frozen=True)
class CutlassW13:
    """FC1 weights ``[E, 2·I_p, H_p/2]`` uint8 ([up; gate]) and swizzled scales ``[E, 2·I_p, H_p/32]``."""

    weight: torch.Tensor
    scale: torch.Tensor
    inter: int
    hidden: int


@dataclass(frozen=True)
class CutlassW2:
    """FC2 weights ``[E, H_p, I_p/2]`` uint8 and swizzled scales ``[E, H_p, I_p/32]``."""

    weight: torch.Tensor
    scale: torch.Tensor
    inter: int
    hidden: int


def swap_halves(t: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """``cat([second half, first half], dim)`` — SGLang's ``reorder_w1w3_to_w3w1`` on one tensor."""
    if t.shape[dim] % 2:
        raise ValueError(f"cannot split dim {dim} of shape {tuple(t.shape)} into two halves")
    first, second = t.chunk(2, dim=dim)
    return torch.cat([second, first], dim=dim).contiguous()


def _check_w13(weight: torch.Tensor, scale: torch.Tensor) -> tuple[int, int, int]:
    if weight.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise TypeError(f"w13 weight/scale must be uint8, got {weight.dtype}/{scale.dtype}")
    if weight.dim() != 3 or scale.dim() != 3:
        raise ValueError(f"w13 weight/scale must be [E, 2I, ...], got {tuple(weight.shape)}/{tuple(scale.shape)}")
    e, two_i, half_h = weight.shape
    h = half_h * 2
    if two_i % 2 or scale.shape != (e, two_i, h // BLOCK):
        raise ValueError(
            f"w13 scale shape {tuple(scale.shape)} does not match weight {tuple(weight.shape)}: "
            f"expected ({e}, {two_i}, {h // BLOCK}) with an even row count"
        )
    return e, two_i // 2, h


_WORDS = ((8, torch.int64), (4, torch.int32), (2, torch.int16))


def _viewable(t: torch.Tensor, width: int) -> bool:
    """Whether byte tensor ``t`` can be viewed as ``width``-byte words (last dim, offset and strides divisible)."""
    if t.dim() == 0 or t.stride(-1) != 1 or t.shape[-1] % width or t.storage_offset() % width:
        return False
    return all(stride % width == 0 for stride in t.stride()[:-1])


def copy_bytes(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for uint8 tensors, moving the widest words (8/4/2 bytes) that both layouts allow."""
    for width, dtype in _WORDS:
        if _viewable(dst, width) and _viewable(src, width):
            dst.view(dtype).copy_(src.view(dtype))
            return
    dst.copy_(src)


def _canvas(shape: tuple[int, ...], padded: bool, device: torch.device) -> torch.Tensor:
    return (torch.zeros if padded else torch.empty)(shape, dtype=torch.uint8, device=device)


def kimi_w13_to_cutlass(weight: torch.Tensor, scale: torch.Tensor, *, align: int = ALIGN) -> CutlassW13:
    """Kimi ``[gate; up]`` w13 (``[E, 2I, H/2]`` bytes, ``[E, 2I, H/32]`` scales) → CUTLASS ``[up; gate]``."""
    e, inter, h = _check_w13(weight, scale)
    ip, hp = round_up(inter, align), round_up(h, align)
    padded = (ip, hp) != (inter, h)
    w = _canvas((e, 2 * ip, hp // 2), padded, weight.device)
    s = _canvas((e, 2 * ip, hp // BLOCK), padded, scale.device)
    copy_bytes(w[:, 0:inter, : h // 2], weight[:, inter : 2 * inter])  # up (w3) first
    copy_bytes(w[:, ip : ip + inter, : h // 2], weight[:, 0:inter])  # gate (w1) second
    copy_bytes(s[:, 0:inter, : h // BLOCK], scale[:, inter : 2 * inter])
    copy_bytes(s[:, ip : ip + inter, : h // BLOCK], scale[:, 0:inter])
    return CutlassW13(weight=w, scale=swizzle_128x4(s), inter=inter, hidden=h)


def cutlass_w13_to_kimi(w13: CutlassW13) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`kimi_w13_to_cutlass`: back to Kimi ``[gate; up]`` bytes and linear scales."""
    e, two_ip, half_hp = w13.weight.shape
    ip = two_ip // 2
    inter, h = w13.inter, w13.hidden
    s = unswizzle_128x4(w13.scale, two_ip, half_hp * 2 // BLOCK).reshape(e, two_ip, -1)
    weight = torch.cat([w13.weight[:, ip : ip + inter, : h // 2], w13.weight[:, 0:inter, : h // 2]], dim=1)
    scale = torch.cat([s[:, ip : ip + inter, : h // BLOCK], s[:, 0:inter, : h // BLOCK]], dim=1)
    return weight.contiguous(), scale.contiguous()


def kimi_w2_to_cutlass(weight: torch.Tensor, scale: torch.Tensor, *, align: int = ALIGN) -> CutlassW2:
    """w2 (``[E, H, I/2]`` bytes, ``[E, H, I/32]`` scales) → padded ``[E, H_p, I_p/2]`` + swizzled scales."""
    if weight.dtype != torch.uint8 or scale.dtype != torch.uint8:
        raise TypeError(f"w2 weight/scale must be uint8, got {weight.dtype}/{scale.dtype}")
    e, h, half_i = weight.shape
    inter = half_i * 2
    if scale.shape != (e, h, inter // BLOCK):
        raise ValueError(f"w2 scale shape {tuple(scale.shape)} does not match weight {tuple(weight.shape)}")
    ip, hp = round_up(inter, align), round_up(h, align)
    padded = (ip, hp) != (inter, h)
    w = _canvas((e, hp, ip // 2), padded, weight.device)
    s = _canvas((e, hp, ip // BLOCK), padded, scale.device)
    copy_bytes(w[:, :h, : inter // 2], weight)
    copy_bytes(s[:, :h, : inter // BLOCK], scale)
    return CutlassW2(weight=w, scale=swizzle_128x4(s), inter=inter, hidden=h)


def cutlass_w2_to_kimi(w2: CutlassW2) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`kimi_w2_to_cutlass`."""
    e, hp, half_ip = w2.weight.shape
    s = unswizzle_128x4(w2.scale, hp, half_ip * 2 // BLOCK).reshape(e, hp, -1)
    return (
        w2.weight[:, : w2.hidden, : w2.inter // 2].contiguous(),
        s[:, : w2.hidden, : w2.inter // BLOCK].contiguous(),
    )
