"""The CUTLASS/cuBLAS "128x4" block-scale layout (FlashInfer ``block_scale_interleave``) and its inverse.

This module owns the index map of FlashInfer's ``get_sf_out_offset_128x4`` (domain.md §3.6): an unswizzled
scale matrix ``[M, Kv]`` (``Kv = K/32``) is padded with zero bytes to ``[round_up(M,128), round_up(Kv,4)]``
and stored tile by tile (row tiles of 128 outer, column tiles of 4 inner, 512 bytes each); inside a tile
``offset = (m % 32)·16 + ((m % 128) // 32)·4 + (k % 4)``. :func:`swizzled_offsets` writes that map out from the
formula (not from a reshape/permute trick), so the tests can hold the byte mover against it and against
torchao's ``to_blocked`` as independent implementations. The mover itself is one tile permutation: a view of
the padded matrix as ``[Mp/128, 4, 32, Kvp/4, 4]`` (the last 4 bytes moved as one int32 word when the dtype is
bytes) permuted to ``[Mp/128, Kvp/4, 32, 4, 4]`` and copied once. Leading dimensions are batches (experts):
each is swizzled on its own, as ``block_scale_interleave`` does for ``[E, M, Kv]``. Results are
``[..., Mp, Kvp]``; ``.flatten()`` gives the flat buffer the kernels take.
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


def _tiles(padded: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``padded [B, Mp, Kvp]`` viewed as ``[B, Mp/128, 4, 32, Kvp/4, (4)]``; the trailing 4 folds into int32 words
    for byte tensors that allow it. Returns the view and the number of trailing dims (1 or 0) after ``Kvp/4``."""
    b, mp, kp = padded.shape
    if padded.element_size() == 1 and padded.is_contiguous() and padded.storage_offset() % 4 == 0:
        return padded.view(torch.int32).view(b, mp // 128, 4, 32, kp // 4), 0
    return padded.reshape(b, mp // 128, 4, 32, kp // 4, 4), 1


def swizzle_128x4(scale: torch.Tensor) -> torch.Tensor:
    """Swizzle ``[..., M, Kv]`` scale bytes (any dtype, usually uint8) into ``[..., Mp, Kvp]`` 128x4 order."""
    if scale.dim() < 2:
        raise ValueError(f"swizzle_128x4 needs [..., M, Kv], got shape {tuple(scale.shape)}")
    *lead, rows, cols = scale.shape
    mp, kp = round_up(rows, 128), round_up(cols, 4)
    if (rows, cols) == (mp, kp):
        padded = scale.reshape(-1, mp, kp).contiguous()
    else:
        padded = torch.zeros((*lead, mp, kp), dtype=scale.dtype, device=scale.device)
        padded[..., :rows, :cols] = scale
        padded = padded.view(-1, mp, kp)
    tiles, tail = _tiles(padded)
    order = (0, 1, 4, 3, 2, *((5,) if tail else ()))  # [B, Mt, 4, 32, Kt, (4)] -> [B, Mt, Kt, 32, 4, (4)]
    out = tiles.permute(order).contiguous()
    return out.view(scale.dtype).reshape(*lead, mp, kp)


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
    flat = swizzled.reshape(-1, mp, kp).contiguous()
    tiles, tail = _tiles(flat)  # the swizzled buffer read as [B, Mt, Kt, 32, 4, (4)] ...
    b = flat.shape[0]
    shape = (b, mp // 128, kp // 4, 32, 4, *((4,) if tail else ()))
    order = (0, 1, 4, 3, 2, *((5,) if tail else ()))  # ... back to [B, Mt, 4, 32, Kt, (4)]
    padded = tiles.reshape(shape).permute(order).contiguous().view(swizzled.dtype).reshape(b, mp, kp)
    return padded[:, :rows, :cols].reshape(*lead, rows, cols)
