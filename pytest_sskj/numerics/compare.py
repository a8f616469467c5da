"""Comparison metrics and assertions for kernel outputs: cosine, NRMSE, max abs/rel error, bf16 ulp, bytes.

This module owns how a numerical acceptance decision is computed and how a failure reads. Metrics are
computed in float64 on flattened tensors (``Metrics``). Assertions raise
:class:`pytest_sskj.errors.NumericsMismatch` (an ``AssertionError``) with a ``pytest.approx``-style message:
mismatched count / total, the worst index (multi-dimensional), its actual and expected values, and the
tolerances in force. Default thresholds come from the users' accepted Kimi-K3 figures (decode M=1 cosine
0.9996223 / NRMSE 2.748 %, prefill M=128 cosine 0.9996152 / NRMSE 2.774 % against an unquantized-activation
reference) and from TensorRT-LLM's K3 gates (8 bf16 ulp of the row max per element, 4 ulp relative RMS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pytest_sskj.errors import NumericsMismatch

__all__ = [
    "SIMILARITY_VS_EMULATION",
    "SIMILARITY_VS_EXACT",
    "Metrics",
    "Similarity",
    "UlpGate",
    "assert_bitwise_equal",
    "assert_close",
    "assert_similar",
    "assert_within_ulp",
    "bf16_ulp",
    "metrics",
]

BF16_ULP_REL = 2.0**-8  # spacing of bf16 relative to a power of two (8 bits of significand incl. hidden)


@dataclass(frozen=True)
class Similarity:
    """Whole-tensor gate: ``cosine >= cosine_min`` and ``nrmse <= nrmse_max`` (NRMSE = rms(a-e)/rms(e))."""

    cosine_min: float = 0.9995
    nrmse_max: float = 0.03


# Against the exact (unquantized-activation) reference the users saw 0.99962 / 2.75-2.77 %: a small margin.
# Their data and reference are not public. On synthetic Gaussian Kimi-size data the MXFP8 data flow by itself
# (our SM120 emulation vs the fp64 exact reference) measured cosine 0.99888 / NRMSE 4.7-4.9 % (H200,
# M=1 and M=128), i.e. outside this gate: tests on synthetic data gate the kernel against the emulation, and
# against the exact reference only relative to what the emulation itself reaches.
SIMILARITY_VS_EXACT = Similarity(cosine_min=0.9995, nrmse_max=0.03)
# Against the emulation of the SM120 data flow (MXFP8 input + requant, bf16 rounding points) only fp32
# ordering, exp/sigmoid ulps and the requant flips they cause remain: ours, an order of magnitude below the
# β/λ = 5/18 (≈10 % NRMSE) and SwiGLU (≈50 %) negative controls measured on random Kimi-like data.
SIMILARITY_VS_EMULATION = Similarity(cosine_min=0.9998, nrmse_max=0.02)


@dataclass(frozen=True)
class UlpGate:
    """TensorRT-LLM K3 gate: per element ≤ ``max_elem`` ulp and RMS ≤ ``max_rms`` ulp of the row's bf16 ulp."""

    max_elem: float = 8.0
    max_rms: float = 4.0


@dataclass(frozen=True)
class Metrics:
    """Summary of ``actual`` vs ``expected``; ``None`` where undefined (e.g. cosine of a zero tensor)."""

    numel: int
    cosine: float | None
    nrmse: float | None
    max_abs: float
    max_rel: float | None
    worst_index: tuple[int, ...]
    nonfinite_actual: int
    nonfinite_expected: int

    def describe(self) -> str:
        cos = "undefined" if self.cosine is None else f"{self.cosine:.7f}"
        nrmse = "undefined" if self.nrmse is None else f"{100 * self.nrmse:.3f} %"
        rel = "undefined" if self.max_rel is None else f"{self.max_rel:.3e}"
        return (
            f"cosine {cos}, NRMSE {nrmse}, max abs {self.max_abs:.3e} at {self.worst_index}, max rel {rel}, "
            f"non-finite actual/expected {self.nonfinite_actual}/{self.nonfinite_expected} of {self.numel}"
        )


def _pair(actual: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if tuple(actual.shape) != tuple(expected.shape):
        raise NumericsMismatch(f"shape mismatch: actual {tuple(actual.shape)} vs expected {tuple(expected.shape)}")
    return actual.detach().to("cpu", torch.float64), expected.detach().to("cpu", torch.float64)


def _unravel(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    out: list[int] = []
    for dim in reversed(shape):
        out.append(flat_index % dim if dim else 0)
        flat_index //= dim if dim else 1
    return tuple(reversed(out))


def metrics(actual: torch.Tensor, expected: torch.Tensor) -> Metrics:
    """Cosine similarity, NRMSE, max abs/rel error (float64) of two same-shaped tensors."""
    a, e = _pair(actual, expected)
    shape = tuple(actual.shape)
    nonfinite_a = int((~torch.isfinite(a)).sum())
    nonfinite_e = int((~torch.isfinite(e)).sum())
    af, ef = a.flatten(), e.flatten()
    diff = (af - ef).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    numel = af.numel()
    if numel == 0:
        return Metrics(0, None, None, 0.0, None, (), 0, 0)
    worst = int(torch.argmax(diff))
    na, ne = float(af.norm()), float(ef.norm())
    cosine = float(torch.dot(af, ef) / (na * ne)) if na > 0 and ne > 0 else None
    rms_e = float(ef.pow(2).mean().sqrt())
    nrmse = float((af - ef).pow(2).mean().sqrt()) / rms_e if rms_e > 0 else None
    nz = ef != 0
    max_rel = float((diff[nz] / ef[nz].abs()).max()) if bool(nz.any()) else None
    return Metrics(
        numel=numel,
        cosine=cosine,
        nrmse=nrmse,
        max_abs=float(diff[worst]),
        max_rel=max_rel,
        worst_index=_unravel(worst, shape),
        nonfinite_actual=nonfinite_a,
        nonfinite_expected=nonfinite_e,
    )


def assert_similar(
    actual: torch.Tensor, expected: torch.Tensor, gate: Similarity = SIMILARITY_VS_EXACT, *, what: str = "output"
) -> Metrics:
    """Raise ``NumericsMismatch`` unless cosine and NRMSE pass ``gate``; return the metrics either way."""
    m = metrics(actual, expected)
    problems = []
    if m.nonfinite_actual > m.nonfinite_expected:
        problems.append(f"{m.nonfinite_actual} non-finite values (expected has {m.nonfinite_expected})")
    if m.cosine is None or m.cosine < gate.cosine_min:
        problems.append(f"cosine {m.cosine} < {gate.cosine_min}")
    if m.nrmse is None or m.nrmse > gate.nrmse_max:
        problems.append(f"NRMSE {m.nrmse} > {gate.nrmse_max}")
    if problems:
        raise NumericsMismatch(
            f"{what} not similar to the reference: {'; '.join(problems)}\n  {m.describe()}\n"
            f"  worst element: actual {float(actual.flatten()[_flat(m.worst_index, actual)]):.6g} vs expected "
            f"{float(expected.flatten()[_flat(m.worst_index, expected)]):.6g}"
        )
    return m


def _flat(index: tuple[int, ...], t: torch.Tensor) -> int:
    flat = 0
    for i, dim in zip(index, t.shape, strict=True):
        flat = flat * dim + i
    return flat


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float = 1.6e-2,
    atol: float = 1e-5,
    what: str = "output",
) -> None:
    """Elementwise ``|a - e| <= atol + rtol·|e|`` (NaN only matches NaN), like ``pytest.approx``.

    Defaults are torch.testing's bf16 tolerances. The failure names the mismatched count / total, the worst
    index with both values, and the tolerances.
    """
    a, e = _pair(actual, expected)
    both_nan = torch.isnan(a) & torch.isnan(e)
    diff = (a - e).abs()
    tol = atol + rtol * e.abs()
    ok = (diff <= tol) | both_nan | ((a == e) & torch.isinf(e))
    bad = ~ok
    count = int(bad.sum())
    if count == 0:
        return
    excess = torch.where(bad, torch.nan_to_num(diff - tol, nan=math.inf, posinf=math.inf), torch.zeros_like(diff))
    worst = int(torch.argmax(excess.flatten()))
    idx = _unravel(worst, tuple(actual.shape))
    av, ev = float(a.flatten()[worst]), float(e.flatten()[worst])
    raise NumericsMismatch(
        f"{what}: {count} / {a.numel()} elements mismatched (rtol={rtol:g}, atol={atol:g})\n"
        f"  worst at index {idx}: actual {av:.8g} vs expected {ev:.8g} ± {float(tol.flatten()[worst]):.3g} "
        f"(|diff| {abs(av - ev):.3g})\n  {metrics(actual, expected).describe()}"
    )


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """float64 spacing of bf16 at ``|x|`` (``2^(floor(log2|x|) - 7)``; zero maps to the min-normal spacing)."""
    mag = x.detach().to(torch.float64).abs()
    exp = torch.floor(torch.log2(torch.clamp(mag, min=2.0**-126)))
    return torch.exp2(exp) * (2.0 * BF16_ULP_REL)


def assert_within_ulp(
    actual: torch.Tensor, expected: torch.Tensor, gate: UlpGate = UlpGate(), *, what: str = "output"
) -> tuple[float, float]:
    """Row-wise ulp gate (last dim = row): error in units of the bf16 ulp of the row's max |expected|.

    Returns ``(max_elem_ulp, max_row_rms_ulp)``; raises ``NumericsMismatch`` above ``gate``.
    """
    a, e = _pair(actual, expected)
    rows_e = e.reshape(-1, e.shape[-1]) if e.dim() else e.reshape(1, 1)
    rows_a = a.reshape(rows_e.shape)
    unit = bf16_ulp(rows_e.abs().amax(dim=-1, keepdim=True))
    err = (rows_a - rows_e).abs() / unit
    err = torch.nan_to_num(err, nan=math.inf)
    rms = err.pow(2).mean(dim=-1).sqrt()
    max_elem, max_rms = float(err.max()), float(rms.max())
    bad = int((err > gate.max_elem).sum())
    if bad or max_rms > gate.max_rms:
        worst = int(torch.argmax(err.flatten()))
        idx = _unravel(worst, tuple(actual.shape))
        raise NumericsMismatch(
            f"{what}: {bad} / {err.numel()} elements beyond {gate.max_elem:g} bf16 ulp of their row max; "
            f"worst row RMS {max_rms:.2f} ulp (limit {gate.max_rms:g})\n"
            f"  worst at index {idx}: actual {float(a.flatten()[worst]):.8g} vs expected "
            f"{float(e.flatten()[worst]):.8g} ({max_elem:.2f} ulp)"
        )
    return max_elem, max_rms


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, *, what: str = "bytes") -> None:
    """Byte-for-byte equality (shape, dtype, bytes); the failure counts mismatching bytes and shows the first."""
    if tuple(actual.shape) != tuple(expected.shape) or actual.dtype != expected.dtype:
        raise NumericsMismatch(
            f"{what}: shape/dtype differ: actual {tuple(actual.shape)} {actual.dtype} vs expected "
            f"{tuple(expected.shape)} {expected.dtype}"
        )
    ab = actual.detach().contiguous().cpu().view(torch.uint8).flatten()
    eb = expected.detach().contiguous().cpu().view(torch.uint8).flatten()
    bad = ab != eb
    count = int(bad.sum())
    if count:
        first = int(torch.nonzero(bad)[0])
        elem = first // actual.element_size()
        idx = _unravel(elem, tuple(actual.shape))
        raise NumericsMismatch(
            f"{what}: {count} / {ab.numel()} bytes differ; first at byte {first} (element {idx}): "
            f"actual 0x{int(ab[first]):02x} vs expected 0x{int(eb[first]):02x}"
        )
