"""SiTU-GLU reference: the golden values of domain.md §4.1, the CUTLASS fp32 form, and negative controls."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics.situ import (  # noqa: E402
    GOLDEN,
    SITU_BETA,
    SITU_LINEAR_BETA,
    situ,
    situ_cutlass,
    situ_gate,
    situ_glu,
    situ_up,
    swiglu,
)

G = torch.tensor([r.g for r in GOLDEN], dtype=torch.float64)
U = torch.tensor([r.u for r in GOLDEN], dtype=torch.float64)
EXPECTED = torch.tensor([r.situ for r in GOLDEN], dtype=torch.float64)


def test_defaults_are_kimi_k3_values() -> None:
    assert (SITU_BETA, SITU_LINEAR_BETA) == (4.0, 25.0)


@pytest.mark.parametrize("row", GOLDEN, ids=lambda r: f"g{r.g:g}_u{r.u:g}")
def test_golden_values_fp64(row: object) -> None:
    g, u = torch.tensor([row.g], dtype=torch.float64), torch.tensor([row.u], dtype=torch.float64)  # type: ignore[attr-defined]
    got = (situ_gate(g).item(), situ_up(u).item(), situ(g, u).item())
    want = (row.gate_act, row.up_act, row.situ)  # type: ignore[attr-defined]
    for name, a, e in zip(("gate_act", "up_act", "situ"), got, want, strict=True):
        assert abs(a - e) <= 5e-9 * max(1.0, abs(e)), f"{name}({row}) = {a!r}, golden {e!r}"


def test_fp32_and_cutlass_forms_match_goldens() -> None:
    fp32 = situ(G.float(), U.float(), dtype=torch.float32).double()
    cut = situ_cutlass(G.float(), U.float()).double()
    for label, got in (("fp32", fp32), ("cutlass tanh=2σ(2z)-1", cut)):
        err = ((got - EXPECTED).abs() / EXPECTED.abs().clamp(min=1.0)).max().item()
        assert err < 2e-6, f"{label} SiTU off the goldens by {err:.3g} (relative)"


@pytest.mark.parametrize(
    ("label", "fn"),
    [
        ("beta/lambda = 5/18", lambda g, u: situ(g, u, 5.0, 18.0)),
        ("plain SwiGLU", swiglu),
        ("lambda = None (identity up)", lambda g, u: situ(g, u, 4.0, None)),
        ("gate and up swapped", lambda g, u: situ(u, g)),
    ],
)
def test_negative_controls_are_told_apart(label: str, fn: object) -> None:
    got = fn(G, U)  # type: ignore[operator]
    rel = ((got - EXPECTED).abs() / EXPECTED.abs().clamp(min=1.0)).max().item()
    assert rel > 0.05, f"{label} is indistinguishable from SiTU(4, 25) on the goldens (max rel diff {rel:.3g})"


def test_bounds_and_gate_minimum() -> None:
    x = torch.linspace(-1e4, 1e4, 200001, dtype=torch.float64)
    out = situ(x, x.flip(0))
    assert out.abs().max().item() <= 100.0, "|SiTU| must not exceed β·λ = 100 (reached only where tanh rounds to 1)"
    g = torch.linspace(-3, 0, 300001, dtype=torch.float64)
    gate = situ_gate(g)
    assert abs(gate.min().item() - (-0.26977)) < 1e-4 and abs(g[gate.argmin()].item() + 1.219) < 2e-3


def test_per_expert_parameters_broadcast_by_row() -> None:
    g = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    u = torch.randn(3, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    beta = torch.tensor([[4.0], [5.0], [3.0]], dtype=torch.float64)
    lam = torch.tensor([[25.0], [18.0], [10.0]], dtype=torch.float64)
    rows = situ(g, u, beta, lam)
    for r in range(3):
        scalar = situ(g[r], u[r], float(beta[r]), float(lam[r]))
        assert torch.allclose(rows[r], scalar, rtol=1e-14, atol=0), f"row {r}: per-row tensor β/λ vs scalars"
    other = situ(g, u, beta, lam.flip(0))
    assert not torch.allclose(other, rows), "negative control: permuting the per-row λ must change rows"


def test_glu_layout_is_gate_then_up_and_large_caps_tend_to_swiglu() -> None:
    g = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    u = torch.randn(4, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.equal(situ_glu(torch.cat([g, u], -1)), situ(g, u))
    near = situ(g, u, 1e6, 1e6)
    assert torch.allclose(near, swiglu(g, u), rtol=1e-6, atol=1e-9), "β, λ → ∞ must give SwiGLU"
