"""Comparison helpers: metrics, pytest.approx-style failures, ulp gates, byte equality, default thresholds."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.errors import NumericsMismatch  # noqa: E402
from pytest_sskj.numerics.compare import (  # noqa: E402
    SIMILARITY_VS_EXACT,
    Similarity,
    UlpGate,
    assert_bitwise_equal,
    assert_close,
    assert_similar,
    assert_within_ulp,
    bf16_ulp,
    metrics,
)


def test_metrics_of_known_pairs() -> None:
    e = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    same = metrics(e, e)
    assert (same.cosine, same.nrmse, same.max_abs) == (pytest.approx(1.0), 0.0, 0.0)
    double = metrics(2 * e, e)
    assert double.cosine == pytest.approx(1.0) and double.nrmse == pytest.approx(1.0)
    assert double.max_abs == 4.0 and double.worst_index == (1, 1) and double.max_rel == pytest.approx(1.0)
    ortho = metrics(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert ortho.cosine == pytest.approx(0.0)
    zero = metrics(torch.zeros(3), torch.zeros(3))
    assert zero.cosine is None and zero.nrmse is None and zero.max_rel is None, "undefined metrics must be None"


def test_assert_close_reports_like_pytest_approx() -> None:
    e = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    a = e.clone()
    a[1, 0] = 4.5
    a[0, 2] = 3.01
    with pytest.raises(NumericsMismatch) as err:
        assert_close(a, e, rtol=1e-3, atol=0.0, what="toy")
    text = str(err.value)
    for needle in (
        "2 / 6 elements mismatched",
        "rtol=0.001",
        "atol=0",
        "worst at index (1, 0)",
        "actual 4.5",
        "expected 4",
    ):
        assert needle in text, f"{needle!r} missing from: {text}"
    assert isinstance(err.value, AssertionError), "NumericsMismatch must be an AssertionError"
    assert_close(a, e, rtol=0.2, atol=0.0)


def test_assert_close_nan_only_matches_nan() -> None:
    e = torch.tensor([math.nan, 1.0])
    assert_close(e.clone(), e)
    with pytest.raises(NumericsMismatch, match="1 / 2"):
        assert_close(torch.tensor([0.0, 1.0]), e)


def test_similarity_gate_and_users_figures() -> None:
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(128, 3584, generator=g, dtype=torch.float64)
    noise = torch.randn(128, 3584, generator=g, dtype=torch.float64)
    noise -= (noise * ref).sum() / (ref * ref).sum() * ref  # orthogonal noise: cos = 1/sqrt(1 + nrmse^2)

    def with_nrmse(target: float) -> torch.Tensor:
        return ref + noise * (target * ref.norm() / noise.norm())

    users = assert_similar(with_nrmse(0.02774), ref, SIMILARITY_VS_EXACT)  # prefill M=128 figure
    assert users.cosine == pytest.approx(0.9996152, abs=2e-6), f"cosine at NRMSE 2.774 %: {users.cosine}"
    with pytest.raises(NumericsMismatch, match="NRMSE"):
        assert_similar(with_nrmse(0.035), ref, SIMILARITY_VS_EXACT, what="too noisy")
    with pytest.raises(NumericsMismatch, match="cosine"):
        assert_similar(-ref, ref, Similarity(0.99, 10.0))


def test_bf16_ulp_and_row_gate() -> None:
    assert bf16_ulp(torch.tensor([1.0, 3.0, 0.5])).tolist() == [2.0**-7, 2.0**-6, 2.0**-8]
    e = torch.tensor([[1.0, 0.5, -1.0, 0.25]])
    max_ulp, rms = assert_within_ulp(e + 2.0**-7, e)
    assert max_ulp == pytest.approx(1.0) and rms == pytest.approx(1.0)
    with pytest.raises(NumericsMismatch, match="beyond 8 bf16 ulp"):
        assert_within_ulp(e + 9 * 2.0**-7, e, UlpGate(max_elem=8, max_rms=100))


def test_bitwise_equal_counts_bytes_and_sees_signed_zero() -> None:
    a = torch.tensor([0.0, 1.0, 2.0])
    assert_bitwise_equal(a, a.clone())
    with pytest.raises(NumericsMismatch, match=r"1 / 12 bytes differ; first at byte 3 \(element \(0,\)\)"):
        assert_bitwise_equal(torch.tensor([-0.0, 1.0, 2.0]), a)
    with pytest.raises(NumericsMismatch, match="shape/dtype differ"):
        assert_bitwise_equal(a.double(), a)
