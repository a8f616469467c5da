"""Frozen oracle: the numerics reference's relayout / swizzle / FP4 dequantize exactly as they were before the
vectorised rewrite (commit 0c77010, ``pytest_sskj/numerics/{swizzle,relayout,mx,moe,formats}.py``).

Do not optimise or "fix" this module: its only job is to be the old behaviour, bit for bit, so that the tests
can hold the fast implementation against it (and the benchmark can time both in the same process). It is a
self-contained copy (its own E2M1 table and E8M0 decode), so later edits of the library cannot leak into it.
"""

from __future__ import annotations

import math

import torch

BLOCK = 32


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


# ----------------------------------------------------------------------------- formats.py (E2M1 / E8M0 only)
def e2m1_device_table(device: torch.device | str) -> torch.Tensor:
    """``formats.device_table(E2M1, device)``: fp32 values of the 16 E2M1 codes, computed on ``device``."""
    c = torch.arange(16, device=device, dtype=torch.int32)
    negative = (c & 8) != 0
    mag = c & 7
    exp_field = mag >> 1
    mant = (mag & 1).to(torch.float32)
    subnormal = mant * float(2.0 ** (0 - 1))
    scale = torch.ldexp(torch.ones_like(mant), (exp_field - 1).to(torch.float32))
    normal = (1.0 + mant * float(2.0**-1)) * scale
    value = torch.where(exp_field == 0, subnormal, normal)
    return torch.where(negative, -value, value)


def e8m0_decode(scale: torch.Tensor) -> torch.Tensor:
    if scale.dtype != torch.uint8:
        scale = scale.view(torch.uint8)
    exps = scale.to(torch.float32) - 127
    out = torch.ldexp(torch.ones_like(exps), exps)
    return torch.where(scale == 0xFF, torch.full_like(out, math.nan), out)


# ----------------------------------------------------------------------------- mx.py / moe.py
def decode_fp4_packed(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    table = e2m1_device_table(packed.device).to(dtype)
    pairs = torch.stack((table.repeat(16), table.repeat_interleave(16)), dim=-1)
    values = pairs.index_select(0, packed.reshape(-1).view(torch.uint8).to(torch.int32))
    return values.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def mx_dequantize_fp4(codes: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``mx_dequantize`` of an E2M1 ``MxTensor`` with linear scales."""
    shape = (*codes.shape[:-1], codes.shape[-1] * 2)
    lead, k = shape[:-1], shape[-1]
    values = decode_fp4_packed(codes)
    sc = e8m0_decode(scale).reshape(*lead, k // BLOCK, 1)
    out = values.reshape(*lead, k // BLOCK, BLOCK) * sc
    return out.reshape(shape).to(dtype)


def dequantize_fp4(packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if dtype == torch.float32:
        return mx_dequantize_fp4(packed, scale)
    values = decode_fp4_packed(packed, dtype)
    k = values.shape[-1]
    blocks = values.reshape(*values.shape[:-1], k // 32, 32)
    return (blocks * e8m0_decode(scale).to(dtype).unsqueeze(-1)).reshape(values.shape)


# ----------------------------------------------------------------------------- swizzle.py
def swizzled_offsets(rows: int, cols: int, device: torch.device | str = "cpu") -> torch.Tensor:
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    m = torch.arange(mp, device=device).view(-1, 1)
    k = torch.arange(kp, device=device).view(1, -1)
    num_k_tiles = kp // 4
    return (m // 128) * (num_k_tiles * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    *lead, rows, cols = scale.shape
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    padded = torch.zeros((*lead, mp, kp), dtype=scale.dtype, device=scale.device)
    padded[..., :rows, :cols] = scale
    offsets = swizzled_offsets(rows, cols, scale.device).flatten()
    flat_in = padded.reshape(-1, mp * kp)
    out = torch.empty_like(flat_in)
    out[:, offsets] = flat_in
    return out.reshape(*lead, mp, kp)


def unswizzle_128x4(swizzled: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    per = mp * kp
    lead = tuple(swizzled.shape[:-2]) if swizzled.dim() >= 3 else ()
    if swizzled.dim() <= 1:
        lead = (swizzled.numel() // per,) if swizzled.numel() != per else ()
    flat = swizzled.reshape(-1, per)
    offsets = swizzled_offsets(rows, cols, swizzled.device).flatten()
    padded = flat[:, offsets].reshape(-1, mp, kp)
    return padded[:, :rows, :cols].reshape(*lead, rows, cols)


# ----------------------------------------------------------------------------- relayout.py
def kimi_w13_to_cutlass(
    weight: torch.Tensor, scale: torch.Tensor, *, align: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weight, swizzled scale)`` of the old ``kimi_w13_to_cutlass``."""
    e, two_i, half_h = weight.shape
    inter, h = two_i // 2, half_h * 2
    ip, hp = round_up(inter, align), round_up(h, align)
    w = torch.zeros((e, 2 * ip, hp // 2), dtype=torch.uint8, device=weight.device)
    s = torch.zeros((e, 2 * ip, hp // BLOCK), dtype=torch.uint8, device=scale.device)
    w[:, 0:inter, : h // 2] = weight[:, inter : 2 * inter]
    w[:, ip : ip + inter, : h // 2] = weight[:, 0:inter]
    s[:, 0:inter, : h // BLOCK] = scale[:, inter : 2 * inter]
    s[:, ip : ip + inter, : h // BLOCK] = scale[:, 0:inter]
    return w, swizzle_128x4(s)


def kimi_w2_to_cutlass(
    weight: torch.Tensor, scale: torch.Tensor, *, align: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    e, h, half_i = weight.shape
    inter = half_i * 2
    ip, hp = round_up(inter, align), round_up(h, align)
    w = torch.zeros((e, hp, ip // 2), dtype=torch.uint8, device=weight.device)
    s = torch.zeros((e, hp, ip // BLOCK), dtype=torch.uint8, device=scale.device)
    w[:, :h, : inter // 2] = weight
    s[:, :h, : inter // BLOCK] = scale
    return w, swizzle_128x4(s)
