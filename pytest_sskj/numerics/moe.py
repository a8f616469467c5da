"""Kimi-K3 routed-MoE reference: router, EP expert ids, and the expert computation in two modes.

This module owns the reference the kernel tests compare against (domain.md §2.3, §5.3, §6.7):

* ``route`` — sigmoid scores, correction bias added *only* for the top-k selection, weights taken from the
  unbiased scores, renormalized, times ``routed_scaling_factor``.
* ``global_to_local`` — EP: rank ``r`` owns global experts ``[r·E_l, (r+1)·E_l)``; others map to −1.
* ``moe_reference(mode=MoeMode.EXACT)`` — fp64 (or fp32) math on dequantized MXFP4 weights and the
  unquantized input: ``Σ_k w_k · w2_e · SiTU(w1_e x, w3_e x)``.
* ``moe_reference(mode=MoeMode.FLASHINFER_SM120)`` — the FlashInfer SM120 CUTLASS data flow: input
  MXFP8-quantized with RCEIL, fp64 GEMM1 rounded to fp32 then bf16 (FC1 storage, **[inferred]**), SiTU in fp32
  as CUTLASS evaluates it, bf16, in-kernel MXFP8 requantization (RCEIL), fp64 GEMM2 rounded to fp32, fp32
  weighted sum over the k slots, bf16 out.

Weights come in Kimi's loaded layout (``MoeWeights``: w13 = ``[gate; up]``); only local experts contribute,
as on one EP rank. ``strategy="dense"`` evaluates every local expert on every token with masks and never
synchronizes with the host, so it can be captured in a CUDA Graph; ``"sparse"`` only runs selected experts.
Both fill the same ``[T, k, H]`` per-slot contribution tensor and reduce it in the same order.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import torch

from pytest_sskj.numerics.mx import (
    ScaleMode,
    dequantize_fp4_values,
    mx_dequantize,
    mxfp4_quantize,
    mxfp8_quantize,
)
from pytest_sskj.numerics.situ import SITU_BETA, SITU_LINEAR_BETA, Param, situ, situ_cutlass, swiglu

__all__ = [
    "MoeMode",
    "MoeWeights",
    "dequantize_fp4",
    "global_to_local",
    "moe_reference",
    "random_moe_weights",
    "route",
]


class MoeMode(enum.Enum):
    EXACT = "exact"
    FLASHINFER_SM120 = "flashinfer_sm120"


@dataclass(frozen=True)
class MoeWeights:
    """One rank's routed experts in Kimi's loaded layout (uint8 packed FP4 + uint8 E8M0 scales).

    ``w13 [E, 2I, H/2]`` rows ``[gate (w1); up (w3)]``; ``w13_scale [E, 2I, H/32]``;
    ``w2 [E, H, I/2]``; ``w2_scale [E, H, I/32]``.
    """

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor

    @property
    def num_experts(self) -> int:
        return int(self.w13.shape[0])

    @property
    def inter(self) -> int:
        return int(self.w13.shape[1]) // 2

    @property
    def hidden(self) -> int:
        return int(self.w13.shape[2]) * 2

    def to(self, device: torch.device | str) -> MoeWeights:
        return MoeWeights(*(t.to(device) for t in (self.w13, self.w13_scale, self.w2, self.w2_scale)))

    def expert(self, e: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Dequantized ``(w1 [I, H], w3 [I, H], w2 [H, I])`` of local expert ``e`` in ``dtype``."""
        w13 = dequantize_fp4(self.w13[e], self.w13_scale[e]).to(dtype)
        w2 = dequantize_fp4(self.w2[e], self.w2_scale[e]).to(dtype)
        return w13[: self.inter], w13[self.inter :], w2


def dequantize_fp4(
    packed: torch.Tensor,
    scale: torch.Tensor,
    dtype: torch.dtype = torch.float32,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """``E2M1(code) · 2^(scale-127)`` of packed bytes ``[..., K/2]`` with linear scales ``[..., K/32]``.

    fp32 by default. ``dtype=torch.bfloat16`` computes directly in bf16: bit-identical to the fp32 result cast
    to bf16 (a 2-bit significand times a power of two is exact in bf16, whose exponent range is fp32's), with a
    third of the memory traffic. Either way :func:`~pytest_sskj.numerics.mx.dequantize_fp4_values` (products
    evaluated in ``dtype``: one table gather, or the arithmetic itself for small inputs), into ``out`` if given.
    """
    return dequantize_fp4_values(packed, scale, dtype, out=out)


def random_moe_weights(
    num_experts: int,
    hidden: int,
    inter: int,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    kind: str = "gaussian",
    fc1_rms: float = 3.0,
    out_rms: float = 1.0,
) -> MoeWeights:
    """Random routed experts in Kimi's loaded layout, generated on ``device`` (deterministic per device).

    ``kind="gaussian"``: normal weights quantized to MXFP4 with RCEIL (like a QAT checkpoint), scaled so
    that for ``x ~ N(0, 1)`` the FC1 outputs have RMS ``fc1_rms`` (3 keeps SiTU well inside its
    non-linear range, where it differs from SwiGLU) and the expert outputs RMS about ``out_rms``.
    ``kind="uniform"``: uniformly random FP4 bytes with E8M0 scales chosen for the same FC1 RMS.
    """
    if kind not in ("gaussian", "uniform"):
        raise ValueError(f"kind must be 'gaussian' or 'uniform', got {kind!r}")
    g = torch.Generator(device=device).manual_seed(seed)
    sigma1 = fc1_rms / math.sqrt(hidden)
    sigma2 = out_rms / (math.sqrt(inter) * 5.0)  # SiTU outputs have RMS ~5 for N(0, 3^2) inputs
    if kind == "uniform":
        code_rms = math.sqrt(sum(v * v for v in (0, 0.5, 1, 1.5, 2, 3, 4, 6)) / 8)
        c1 = 127 + round(math.log2(sigma1 / code_rms))
        c2 = 127 + round(math.log2(sigma2 / code_rms))

        def rnd(shape: tuple[int, ...], low: int, high: int) -> torch.Tensor:
            return torch.randint(low, high, shape, generator=g, dtype=torch.uint8, device=device)

        return MoeWeights(
            w13=rnd((num_experts, 2 * inter, hidden // 2), 0, 256),
            w13_scale=rnd((num_experts, 2 * inter, hidden // 32), c1 - 1, c1 + 2),
            w2=rnd((num_experts, hidden, inter // 2), 0, 256),
            w2_scale=rnd((num_experts, hidden, inter // 32), c2 - 1, c2 + 2),
        )
    parts: dict[str, list[torch.Tensor]] = {"w13": [], "w13_scale": [], "w2": [], "w2_scale": []}
    for _ in range(num_experts):
        for name, rows, cols, sigma in (("w13", 2 * inter, hidden, sigma1), ("w2", hidden, inter, sigma2)):
            w = torch.randn((rows, cols), generator=g, device=device) * sigma
            q = mxfp4_quantize(w, ScaleMode.RCEIL)
            parts[name].append(q.codes)
            parts[f"{name}_scale"].append(q.scale)
    return MoeWeights(*(torch.stack(parts[n]) for n in ("w13", "w13_scale", "w2", "w2_scale")))


def route(
    logits: torch.Tensor,
    top_k: int,
    correction_bias: torch.Tensor | None = None,
    *,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Kimi-K3 / DeepSeek-V3 ``noaux_tc`` routing (one group): ``(weights fp32 [T,k], ids int32 [T,k])``.

    Selection uses ``sigmoid(logits) + correction_bias``; the weights are the *unbiased* sigmoid scores of
    the selected experts, renormalized to sum 1 when ``renormalize``. Ties are broken by ``torch.topk``
    (implementation-defined): compare routing as sets, or avoid near-ties.
    """
    scores = torch.sigmoid(logits.to(torch.float32))
    choice = scores if correction_bias is None else scores + correction_bias.to(torch.float32)
    ids = torch.topk(choice, top_k, dim=-1, sorted=True).indices
    weights = torch.gather(scores, -1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * routed_scaling_factor, ids.to(torch.int32)


def global_to_local(ids: torch.Tensor, ep_rank: int, experts_local: int) -> torch.Tensor:
    """Global expert ids → this rank's local ids (int32), −1 for experts owned by another rank."""
    first = ep_rank * experts_local
    local = ids.to(torch.int64) - first
    remote = (local < 0) | (local >= experts_local)
    return torch.where(remote, torch.full_like(local, -1), local).to(torch.int32)


def _per_expert(p: Param, e: int) -> Param:
    if isinstance(p, torch.Tensor) and p.dim() > 0:
        return p[e]
    return p


def _mx8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """bf16 → MXFP8 (RCEIL) → fp32 values the kernel's GEMM actually sees."""
    return mx_dequantize(mxfp8_quantize(x.to(torch.bfloat16), ScaleMode.RCEIL))


def _expert_exact(
    x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, beta: Param, lam: Param, activation: str
) -> torch.Tensor:
    g, u = x @ w1.T, x @ w3.T
    act = swiglu(g, u, dtype=x.dtype) if activation == "swiglu" else situ(g, u, beta, lam, dtype=x.dtype)
    return act @ w2.T


def _expert_sm120(
    xq: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, beta: Param, lam: Param, activation: str
) -> torch.Tensor:
    gate = (xq @ w1.T).to(torch.float32).to(torch.bfloat16)
    up = (xq @ w3.T).to(torch.float32).to(torch.bfloat16)
    if activation == "swiglu":
        act = swiglu(gate, up, dtype=torch.float32).to(torch.bfloat16)
    else:
        act = situ_cutlass(gate, up, beta, lam).to(torch.bfloat16)
    aq = _mx8_roundtrip(act).to(torch.float64)
    return (aq @ w2.T).to(torch.float32)


def moe_reference(
    x: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    weights: MoeWeights,
    *,
    ep_rank: int = 0,
    mode: MoeMode = MoeMode.EXACT,
    situ_beta: Param = SITU_BETA,
    situ_linear_beta: Param = SITU_LINEAR_BETA,
    dtype: torch.dtype = torch.float64,
    strategy: str = "sparse",
    activation: str = "situ",
) -> torch.Tensor:
    """This rank's MoE output ``[T, H]`` for global ``topk_ids [T, k]`` and routing ``topk_weights [T, k]``.

    EXACT returns ``dtype`` (fp64 default); FLASHINFER_SM120 returns bf16 like the kernel. ``situ_beta`` /
    ``situ_linear_beta`` may be per-local-expert tensors ``[E_local]``. ``x`` may be a strided view.
    ``activation="swiglu"`` computes plain SwiGLU instead — the negative control of the SiTU tests.
    """
    if x.dim() != 2 or x.shape[1] != weights.hidden:
        raise ValueError(f"x must be [T, {weights.hidden}], got {tuple(x.shape)}")
    if topk_ids.shape != topk_weights.shape or topk_ids.shape[0] != x.shape[0]:
        raise ValueError(
            f"topk_ids {tuple(topk_ids.shape)} and topk_weights {tuple(topk_weights.shape)} must both be [T, k] "
            f"with T = {x.shape[0]}"
        )
    if strategy not in ("sparse", "dense"):
        raise ValueError(f"strategy must be 'sparse' or 'dense', got {strategy!r}")
    if activation not in ("situ", "swiglu"):
        raise ValueError(f"activation must be 'situ' or 'swiglu', got {activation!r}")
    local = global_to_local(topk_ids, ep_rank, weights.num_experts).to(torch.int64)
    t, k = local.shape
    sm120 = mode is MoeMode.FLASHINFER_SM120
    work = torch.float64 if sm120 else dtype
    xin = _mx8_roundtrip(x).to(torch.float64) if sm120 else x.to(work)
    contrib = torch.zeros((t, k, weights.hidden), dtype=torch.float32 if sm120 else work, device=x.device)
    w_slots = topk_weights.to(torch.float32 if sm120 else work)
    expert_fn = _expert_sm120 if sm120 else _expert_exact
    if strategy == "sparse":
        experts = [int(e) for e in torch.unique(local[local >= 0]).tolist()]
    else:
        experts = list(range(weights.num_experts))
    for e in experts:
        w1, w3, w2 = weights.expert(e, work)
        beta, lam = _per_expert(situ_beta, e), _per_expert(situ_linear_beta, e)
        if strategy == "sparse":
            tok, slot = torch.nonzero(local == e, as_tuple=True)
            rows = xin[tok]
            y = expert_fn(rows, w1, w3, w2, beta, lam, activation)
            contrib[tok, slot] = w_slots[tok, slot].unsqueeze(-1) * y.to(contrib.dtype)
        else:
            y = expert_fn(xin, w1, w3, w2, beta, lam, activation)
            hit = (local == e).unsqueeze(-1)  # [T, k, 1]
            contrib = torch.where(hit, w_slots.unsqueeze(-1) * y.to(contrib.dtype).unsqueeze(1), contrib)
    out = contrib[:, 0]
    for s in range(1, k):  # fixed slot order: identical reduction for both strategies
        out = out + contrib[:, s]
    return out.to(torch.bfloat16) if sm120 else out
