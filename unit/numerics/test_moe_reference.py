"""Kimi-K3 MoE reference: routing, EP expert ids, the exact and SM120-emulation modes, strides, layout."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics.compare import UlpGate, assert_close, assert_within_ulp, metrics  # noqa: E402
from pytest_sskj.numerics.moe import (  # noqa: E402
    MoeMode,
    MoeWeights,
    dequantize_fp4,
    global_to_local,
    moe_reference,
    random_moe_weights,
    route,
)
from pytest_sskj.numerics.situ import situ  # noqa: E402

E_LOCAL, EP, H, INTER, T, K = 4, 2, 128, 64, 6, 3


@pytest.fixture(scope="module")
def case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, MoeWeights, MoeWeights]:
    """Two EP ranks of 4 experts each (8 global), 6 tokens, top-3; the full 8-expert weights too."""
    full = random_moe_weights(E_LOCAL * EP, H, INTER, seed=3, kind="uniform")
    g = torch.Generator().manual_seed(4)
    topk_w, ids = route(torch.randn(T, E_LOCAL * EP, generator=g), K, torch.randn(E_LOCAL * EP, generator=g) * 0.1)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    rank1 = MoeWeights(*(t[E_LOCAL:] for t in (full.w13, full.w13_scale, full.w2, full.w2_scale)))
    return x, ids, topk_w, full, rank1


def test_router_bias_selects_but_does_not_weight() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 0.0, 0.9])  # lifts expert 3 (sigmoid 0.269 + 0.9) above expert 1 (0.731)
    w, ids = route(logits, 2, bias)
    assert ids.tolist() == [[3, 0]] and ids.dtype == torch.int32, f"ids {ids.tolist()}"
    s = torch.sigmoid(logits[0])
    expected = torch.stack([s[3], s[0]]) / (s[3] + s[0])
    assert torch.allclose(w[0], expected), f"weights {w.tolist()} must be unbiased sigmoid scores, renormalized"
    raw, _ = route(logits, 2, bias, renormalize=False, routed_scaling_factor=2.0)
    assert torch.allclose(raw[0], 2.0 * torch.stack([s[3], s[0]]))
    plain_w, plain_ids = route(logits, 2)
    assert plain_ids.tolist() == [[0, 1]] and torch.allclose(plain_w.sum(-1), torch.ones(1))


def test_kimi_sized_routing_is_top16_of_896_renormalized() -> None:
    g = torch.Generator().manual_seed(0)
    w, ids = route(torch.randn(64, 896, generator=g), 16, torch.randn(896, generator=g) * 0.05)
    assert tuple(ids.shape) == (64, 16) and int(ids.max()) < 896
    assert all(len(set(row)) == 16 for row in ids.tolist()), "duplicate experts in a token's top-16"
    assert torch.allclose(w.sum(-1), torch.ones(64), atol=1e-6)


def test_global_to_local_expert_ids() -> None:
    ids = torch.tensor([[0, 223, 224, 447, 448, 895]])
    assert global_to_local(ids, 0, 224).tolist() == [[0, 223, -1, -1, -1, -1]]
    assert global_to_local(ids, 1, 224).tolist() == [[-1, -1, 0, 223, -1, -1]]
    assert global_to_local(ids, 3, 224).tolist() == [[-1, -1, -1, -1, -1, 223]]


def test_exact_mode_matches_a_per_token_loop(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    out = moe_reference(x, ids, topk_w, rank1, ep_rank=1)
    expected = torch.zeros(T, H, dtype=torch.float64)
    for t in range(T):
        for k in range(K):
            e = int(ids[t, k]) - E_LOCAL
            if not 0 <= e < E_LOCAL:
                continue
            w13 = dequantize_fp4(rank1.w13[e], rank1.w13_scale[e]).double()
            w2 = dequantize_fp4(rank1.w2[e], rank1.w2_scale[e]).double()
            xt = x[t].double()
            expected[t] += float(topk_w[t, k]) * (w2 @ situ(w13[:INTER] @ xt, w13[INTER:] @ xt))
    assert_close(out, expected, rtol=1e-12, atol=1e-12, what="exact reference vs per-token loop")


def test_ep_ranks_sum_to_the_single_rank_result(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, full, _ = case
    whole = moe_reference(x, ids, topk_w, full)
    parts = []
    for r in range(EP):
        sl = slice(r * E_LOCAL, (r + 1) * E_LOCAL)
        local = MoeWeights(*(t[sl] for t in (full.w13, full.w13_scale, full.w2, full.w2_scale)))
        parts.append(moe_reference(x, ids, topk_w, local, ep_rank=r))
    assert_close(parts[0] + parts[1], whole, rtol=1e-12, atol=1e-12, what="sum over EP ranks")
    assert not torch.allclose(parts[0], whole), "negative control: one rank alone must not equal the whole"


def test_sm120_emulation_is_close_to_exact_but_not_equal(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    exact = moe_reference(x, ids, topk_w, rank1, ep_rank=1)
    emul = moe_reference(x, ids, topk_w, rank1, ep_rank=1, mode=MoeMode.FLASHINFER_SM120)
    assert emul.dtype == torch.bfloat16
    m = metrics(emul, exact)
    assert m.cosine is not None and m.nrmse is not None
    assert 0.99 < m.cosine < 1.0 and 0.0 < m.nrmse < 0.1, f"emulation vs exact: {m.describe()}"


@pytest.mark.parametrize("mode", list(MoeMode), ids=lambda m: m.value)
def test_strided_input_gives_bit_identical_output(case: tuple, mode: MoeMode) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    wide = torch.zeros(T, 2 * H, dtype=torch.bfloat16)
    wide[:, H:] = x
    view = wide[:, H:]
    assert not view.is_contiguous()
    a = moe_reference(view, ids, topk_w, rank1, ep_rank=1, mode=mode)
    b = moe_reference(x, ids, topk_w, rank1, ep_rank=1, mode=mode)
    assert torch.equal(a, b), f"{mode.value}: strided input changed the result"


@pytest.mark.parametrize("mode", list(MoeMode), ids=lambda m: m.value)
def test_dense_strategy_agrees_with_sparse(case: tuple, mode: MoeMode) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    sparse = moe_reference(x, ids, topk_w, rank1, ep_rank=1, mode=mode)
    dense = moe_reference(x, ids, topk_w, rank1, ep_rank=1, mode=mode, strategy="dense")
    if mode is MoeMode.EXACT:
        assert_close(dense, sparse, rtol=1e-12, atol=1e-15)
    else:
        assert_within_ulp(dense, sparse, UlpGate(max_elem=1.0, max_rms=0.5))


def test_per_expert_situ_parameters_and_activation_controls(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    base = moe_reference(x, ids, topk_w, rank1, ep_rank=1)
    same = moe_reference(x, ids, topk_w, rank1, ep_rank=1, situ_beta=torch.full((E_LOCAL,), 4.0))
    assert_close(same, base, rtol=1e-14, atol=1e-15, what="per-expert tensor equal to the default")
    for label, kwargs in (
        ("beta/lambda = 5/18", {"situ_beta": 5.0, "situ_linear_beta": 18.0}),
        ("SwiGLU", {"activation": "swiglu"}),
    ):
        other = moe_reference(x, ids, topk_w, rank1, ep_rank=1, **kwargs)  # type: ignore[arg-type]
        m = metrics(other, base)
        assert m.nrmse is not None and m.nrmse > 0.02, f"{label} indistinguishable from SiTU(4, 25): {m.describe()}"


def test_gate_up_order_of_w13_matters(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    swapped = MoeWeights(
        torch.cat([rank1.w13[:, INTER:], rank1.w13[:, :INTER]], 1),
        torch.cat([rank1.w13_scale[:, INTER:], rank1.w13_scale[:, :INTER]], 1),
        rank1.w2,
        rank1.w2_scale,
    )
    a = moe_reference(x, ids, topk_w, rank1, ep_rank=1)
    b = moe_reference(x, ids, topk_w, swapped, ep_rank=1)
    m = metrics(b, a)
    assert m.nrmse is not None and m.nrmse > 0.05, f"[up; gate] read as [gate; up] went unnoticed: {m.describe()}"


def test_input_validation(case: tuple) -> None:  # type: ignore[type-arg]
    x, ids, topk_w, _, rank1 = case
    with pytest.raises(ValueError, match=r"x must be \[T, 128\]"):
        moe_reference(x[:, :64], ids, topk_w, rank1)
    with pytest.raises(ValueError, match="strategy"):
        moe_reference(x, ids, topk_w, rank1, strategy="fast")


def test_bf16_dequantization_equals_fp32_then_cast() -> None:
    g = torch.Generator().manual_seed(8)
    packed = torch.randint(0, 256, (64, 128), generator=g, dtype=torch.uint8)
    scale = torch.randint(0, 255, (64, 8), generator=g, dtype=torch.uint8)  # the whole finite E8M0 range
    direct = dequantize_fp4(packed, scale, dtype=torch.bfloat16)
    via_fp32 = dequantize_fp4(packed, scale).to(torch.bfloat16)
    assert torch.equal(direct.view(torch.int16), via_fp32.view(torch.int16)), "bf16 fast path changed bits"
