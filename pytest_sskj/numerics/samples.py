"""Deterministic test inputs for MX quantizer comparisons: random blocks over many binades, and edge blocks.

This module owns the inputs the bit-exact tests feed to every quantizer (ours, torchao, FlashInfer), so that
all comparisons use the same cases: per-block random binades (every exponent path), the blocks of
domain.md §3.4 (E4M3 amax 500 / 300 / 449 / 512, E2M1 amax 7, RNE ties, fp32 subnormals, zeros, ±0) and,
optionally, blocks whose amax sits exactly on ``max·2^k`` — the boundary where FlashInfer's
``rcp.approx`` may round the scale differently **[UNCONFIRMED]**, left out of GPU bit-exact sets.
"""

from __future__ import annotations

import torch

__all__ = ["edge_blocks", "random_blocks"]


def random_blocks(
    rows: int,
    cols: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
    binades: tuple[int, int] = (-40, 40),
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Normal samples, each 32-block scaled by its own random power of two in ``binades``."""
    if cols % 32:
        raise ValueError(f"cols must be a multiple of 32, got {cols}")
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(rows, cols, generator=g)
    shift = torch.randint(binades[0], binades[1], (rows, cols // 32, 1), generator=g).to(torch.float32)
    scale = torch.exp2(shift).expand(rows, cols // 32, 32).reshape(rows, cols)
    return (base * scale).to(dtype).to(device)


_AMAXES = (500.0, 300.0, 7.0, 449.0, 0.75, 1.25, 3.5, 5.0, 1e-3, 65504.0, 3e38, 1.0, 2.0, 0.1)
_BOUNDARY_AMAXES = (448.0, 6.0, 896.0, 12.0, 512.0)


def edge_blocks(*, include_max_boundaries: bool = True, bf16_safe: bool = False) -> torch.Tensor:
    """float32 ``[N, 32]``, one edge case per row (finite values only; NaN/Inf tests build their own).

    ``bf16_safe`` drops the rows that bf16 cannot represent exactly (fp32 subnormals, 3e38 is kept since bf16
    reaches 3.39e38). ``include_max_boundaries=False`` drops amax exactly ``448·2^k`` / ``6·2^k``.
    """
    g = torch.Generator().manual_seed(7)
    rows: list[torch.Tensor] = []

    def block(amax: float) -> torch.Tensor:
        b = (torch.rand(32, generator=g) * 2 - 1) * amax * 0.5
        b[int(torch.randint(0, 32, (1,), generator=g))] = amax
        return b

    amaxes = _AMAXES + (_BOUNDARY_AMAXES if include_max_boundaries else ())
    for amax in amaxes:
        rows.append(block(amax))
        rows.append(-block(amax))
    rows.append(torch.zeros(32))
    rows.append(-torch.zeros(32))
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 4.0] * 4)  # E2M1 RNE ties at scale 1
    rows.append(ties)
    rows.append(-ties)
    rows.append(torch.tensor([2.0**-20] * 31 + [2.0**-14]))  # E4M3 subnormal outputs after scaling
    if not bf16_safe:
        rows.append(torch.full((32,), 1e-40))  # fp32 subnormal input
        rows.append(torch.linspace(-1e-39, 1e-39, 32))
        rows.append(torch.tensor([2.0**-126] * 16 + [2.0**-149] * 16))
    return torch.stack(rows)
