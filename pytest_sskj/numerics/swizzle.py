"""The CUTLASS/cuBLAS "128x4" block-scale layout (FlashInfer ``block_scale_interleave``) and its inverse.

This module owns the index map of FlashInfer's ``get_sf_out_offset_128x4`` (domain.md §3.6): an unswizzled
scale matrix ``[M, Kv]`` (``Kv = K/32``) is padded with zero bytes to ``[round_up(M,128), round_up(Kv,4)]``
and stored tile by tile (row tiles of 128 outer, column tiles of 4 inner, 512 bytes each); inside a tile
``offset = (m % 32)·16 + ((m % 128) // 32)·4 + (k % 4)``. The map is written out from that formula (not
from a reshape/permute trick), so tests can compare it with torchao's ``to_blocked`` as an independent
implementation. Leading dimensions are batches (experts): each is swizzled on its own, as
``block_scale_interleave`` does for ``[E, M, Kv]``. Results are ``[..., Mp, Kvp]``; ``.flatten()`` gives the
flat buffer the kernels take.
"""

from __future__ import annotations

import torch

__all__ = ["round_up", "swizzle_128x4", "swizzled_offsets", "unswizzle_128x4"]


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def swizzled_offsets(rows: int, cols: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """int64 ``[Mp, Kvp]``: the position in the flat swizzled buffer of every padded (row, column)."""
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    m = torch.arange(mp, device=device).view(-1, 1)
    k = torch.arange(kp, device=device).view(1, -1)
    num_k_tiles = kp // 4
    return (m // 128) * (num_k_tiles * 512) + (k // 4) * 512 + (m % 32) * 16 + ((m % 128) // 32) * 4 + (k % 4)


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    """Swizzle ``[..., M, Kv]`` scale bytes (any dtype, usually uint8) into ``[..., Mp, Kvp]`` 128x4 order."""
    if scale.dim() < 2:
        raise ValueError(f"swizzle_128x4 needs [..., M, Kv], got shape {tuple(scale.shape)}")
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
    """Inverse of :func:`swizzle_128x4`: a swizzled buffer (``[..., Mp, Kvp]`` or flat per batch) → ``[..., M, Kv]``.

    A flat 1-D buffer holding several batches is accepted (FlashInfer's ``block_scale_interleave`` output
    for ``[E, M, Kv]``); the batch count is inferred from its size.
    """
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    per = mp * kp
    if swizzled.numel() % per:
        raise ValueError(
            f"swizzled scale buffer of {swizzled.numel()} bytes is not a multiple of the padded size "
            f"{mp}x{kp} = {per} for rows={rows}, cols={cols}"
        )
    lead = tuple(swizzled.shape[:-2]) if swizzled.dim() >= 3 else ()
    if swizzled.dim() <= 1:
        lead = (swizzled.numel() // per,) if swizzled.numel() != per else ()
    flat = swizzled.reshape(-1, per)
    offsets = swizzled_offsets(rows, cols, swizzled.device).flatten()
    padded = flat[:, offsets].reshape(-1, mp, kp)
    return padded[:, :rows, :cols].reshape(*lead, rows, cols)
