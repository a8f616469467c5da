"""SiTU-GLU, the Kimi-K3 expert activation, as a reference in fp64/fp32 (plus SwiGLU for negative controls).

This module owns the activation semantics (domain.md §4.1): ``gate_act(g) = β·tanh(g/β)·σ(g)`` (the sigmoid
reads the *uncapped* gate), ``up_act(u) = λ·tanh(u/λ)`` (identity when λ is None), ``SiTU = gate_act·up_act``,
β = 4.0 and λ = 25.0 by default; β and λ may be tensors broadcast against the inputs (per expert or per
row). ``situ_cutlass`` reproduces FlashInfer's CUTLASS ``SituAdaptor`` in fp32 (tanh evaluated as
``2σ(2z)−1``, multiplication by the fp32 reciprocals 1/β, 1/λ). ``GOLDEN`` holds the float64 values of
domain.md §4.1, the fixed points every implementation must hit.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = [
    "GOLDEN",
    "SITU_BETA",
    "SITU_LINEAR_BETA",
    "Golden",
    "Param",
    "situ",
    "situ_cutlass",
    "situ_gate",
    "situ_glu",
    "situ_up",
    "swiglu",
]

SITU_BETA = 4.0
SITU_LINEAR_BETA = 25.0

Param = float | torch.Tensor


class Golden(NamedTuple):
    g: float
    u: float
    gate_act: float
    up_act: float
    situ: float


GOLDEN: tuple[Golden, ...] = (
    Golden(0.0, 1.0, 0.0, 0.999467008, 0.0),
    Golden(1.0, 1.0, 0.716199557, 0.999467008, 0.715817828),
    Golden(-1.0, 1.0, -0.263475093, 0.999467008, -0.263334663),
    Golden(2.0, 3.0, 1.628125767, 2.985682463, 4.861066551),
    Golden(4.0, 10.0, 2.991583854, 9.498724056, 28.416229523),
    Golden(8.0, 25.0, 3.854817173, 19.039853899, 73.395155785),
    Golden(-3.0, 5.0, -0.120489975, 4.934383006, -0.594543683),
    Golden(100.0, 1000.0, 4.0, 25.0, 100.0),
)


def _param(p: Param, like: torch.Tensor) -> Param:
    """Tensors move to ``like``'s device/dtype; Python floats stay scalars (no host-to-device copy)."""
    if isinstance(p, torch.Tensor):
        return p.to(device=like.device, dtype=like.dtype)
    return float(p)


def situ_gate(g: torch.Tensor, beta: Param = SITU_BETA) -> torch.Tensor:
    """``β·tanh(g/β)·σ(g)`` in ``g``'s dtype."""
    b = _param(beta, g)
    return b * torch.tanh(g / b) * torch.sigmoid(g)


def situ_up(u: torch.Tensor, linear_beta: Param | None = SITU_LINEAR_BETA) -> torch.Tensor:
    """``λ·tanh(u/λ)``; the identity when ``linear_beta`` is None."""
    if linear_beta is None:
        return u
    lam = _param(linear_beta, u)
    return lam * torch.tanh(u / lam)


def situ(
    g: torch.Tensor,
    u: torch.Tensor,
    beta: Param = SITU_BETA,
    linear_beta: Param | None = SITU_LINEAR_BETA,
    *,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """SiTU(g, u) computed in ``dtype`` (fp64 by default) and returned in ``dtype``."""
    g = g.to(dtype)
    u = u.to(dtype)
    return situ_gate(g, beta) * situ_up(u, linear_beta)


def situ_glu(
    x: torch.Tensor,
    beta: Param = SITU_BETA,
    linear_beta: Param | None = SITU_LINEAR_BETA,
    *,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """SiTU of ``x = [gate | up]`` along the last dim (the official ``SituAndMul`` order: gate first)."""
    if x.shape[-1] % 2:
        raise ValueError(f"situ_glu needs an even last dimension [gate | up], got {tuple(x.shape)}")
    g, u = x.chunk(2, dim=-1)
    return situ(g, u, beta, linear_beta, dtype=dtype)


def swiglu(g: torch.Tensor, u: torch.Tensor, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Plain SwiGLU ``SiLU(g)·u`` — the activation a mis-plumbed kernel would compute instead of SiTU."""
    g = g.to(dtype)
    return torch.nn.functional.silu(g) * u.to(dtype)


def situ_cutlass(
    g: torch.Tensor,
    u: torch.Tensor,
    beta: Param = SITU_BETA,
    linear_beta: Param = SITU_LINEAR_BETA,
) -> torch.Tensor:
    """fp32 emulation of FlashInfer's CUTLASS ``SituAdaptor`` (#4460).

    ``tanh(z) := 2·σ(2z) − 1`` with ``σ(x) = 1/(1+e^-x)``; the result is
    ``(tanh(g·(1/β))·σ(g)·β) · (tanh(u·(1/λ))·λ)`` with fp32 reciprocals, evaluated left to right.
    """
    g32 = g.to(torch.float32)
    u32 = u.to(torch.float32)
    b = _param(beta, g32)
    lam = _param(linear_beta, u32)

    def sig(z: torch.Tensor) -> torch.Tensor:
        return 1.0 / (1.0 + torch.exp(-z))

    def tanh_via_sigmoid(z: torch.Tensor) -> torch.Tensor:
        return 2.0 * sig(2.0 * z) - 1.0

    gate = tanh_via_sigmoid(g32 * (1.0 / b)) * sig(g32) * b
    up = tanh_via_sigmoid(u32 * (1.0 / lam)) * lam
    return gate * up
