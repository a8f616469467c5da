"""GPU tests of the Kimi-K3 MoE: the reference on CUDA, and FlashInfer's SM120 CUTLASS MXFP8 x MXFP4 kernel.

* Any CUDA GPU: the reference MoE on CUDA equals the CPU result (fp64 exact mode to 1e-9, SM120 emulation
  within 1 bf16 ulp), and a CUDA Graph capture/replay of it equals eager execution bit for bit.
* SM120 + FlashInfer with CUTLASS SiTU only (skipped elsewhere with the reason), at Kimi TP32/EP4 sizes
  (224 local experts, I=384, H=3584; decode M=1, prefill M=128): plumbing bit-equal to a direct
  ``cutlass_fused_moe`` call built with SGLang's recipe; numerics against the emulation and the exact
  reference with SiTU negative controls (β/λ = 5/18, SwiGLU); every EP rank; non-contiguous input; CUDA Graph.
* The SM120 attention-residual architecture gate, when sglang is importable.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.errors import NumericsMismatch  # noqa: E402
from pytest_sskj.numerics import flashinfer_probe as probe  # noqa: E402
from pytest_sskj.numerics.compare import (  # noqa: E402
    SIMILARITY_VS_EMULATION,
    Similarity,
    UlpGate,
    assert_bitwise_equal,
    assert_close,
    assert_similar,
    assert_within_ulp,
    metrics,
)
from pytest_sskj.numerics.moe import MoeMode, MoeWeights, global_to_local, moe_reference, random_moe_weights, route  # noqa: E402
from pytest_sskj.numerics.relayout import swap_halves  # noqa: E402
from pytest_sskj.numerics.shapes import KIMI_K3, kimi_k3_rank_shapes  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")


def small_case(device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, MoeWeights]:
    """EP rank 1 of 2: 8 local of 16 experts, H=512, I=256, 12 tokens, top-4."""
    weights = random_moe_weights(8, 512, 256, seed=seed, kind="uniform")
    g = torch.Generator().manual_seed(seed + 1)
    topk_w, ids = route(torch.randn(12, 16, generator=g), 4, torch.randn(16, generator=g) * 0.1)
    x = torch.randn(12, 512, generator=g).to(torch.bfloat16)
    return x.to(device), ids.to(device), topk_w.to(device), weights.to(device)


@pytest.mark.gpu
@needs_cuda
def test_reference_moe_on_cuda_equals_cpu() -> None:
    cpu = small_case("cpu")
    gpu = small_case("cuda")
    exact_cpu = moe_reference(*cpu, ep_rank=1)
    exact_gpu = moe_reference(*gpu, ep_rank=1)
    assert_close(exact_gpu, exact_cpu, rtol=1e-9, atol=1e-12, what="fp64 exact reference, CUDA vs CPU")
    em_cpu = moe_reference(*cpu, ep_rank=1, mode=MoeMode.FLASHINFER_SM120)
    em_gpu = moe_reference(*gpu, ep_rank=1, mode=MoeMode.FLASHINFER_SM120)
    differing = int((em_gpu.cpu() != em_cpu).sum())
    max_ulp, _ = assert_within_ulp(em_gpu, em_cpu, UlpGate(max_elem=1.0, max_rms=0.25), what="SM120 emulation")
    print(f"SM120 emulation CUDA vs CPU: {differing}/{em_cpu.numel()} bf16 outputs differ, max {max_ulp:.2f} ulp")


def _graph_capture(fn: Any) -> tuple[Any, torch.Tensor]:
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("mode", [MoeMode.EXACT, MoeMode.FLASHINFER_SM120], ids=lambda m: m.value)
def test_reference_moe_cuda_graph_replay_equals_eager(mode: MoeMode) -> None:
    x, ids, topk_w, weights = small_case("cuda")
    static_x = x.clone()

    def run() -> torch.Tensor:
        return moe_reference(static_x, ids, topk_w, weights, ep_rank=1, mode=mode, strategy="dense")

    graph, out = _graph_capture(run)
    fresh = torch.randn(x.shape, generator=torch.Generator().manual_seed(99)).to(torch.bfloat16).cuda()
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    eager = moe_reference(fresh, ids, topk_w, weights, ep_rank=1, mode=mode, strategy="dense")
    assert_bitwise_equal(out, eager, what=f"{mode.value} reference: graph replay vs eager")
    sparse = moe_reference(fresh, ids, topk_w, weights, ep_rank=1, mode=mode, strategy="sparse")
    if mode is MoeMode.EXACT:
        assert_close(sparse, eager, rtol=1e-12, atol=1e-15, what="sparse vs dense strategy")
    else:
        assert_within_ulp(sparse, eager, UlpGate(max_elem=1.0, max_rms=0.25), what="sparse vs dense strategy")


# ----------------------------------------------------------------------------- SM120 CUTLASS kernel
KIMI_EP4 = kimi_k3_rank_shapes(tp=32, ep=4)


def _sm120_guard() -> None:
    reason = probe.cutlass_situ_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def kimi_rank() -> tuple[MoeWeights, Any]:
    """Random QAT-like weights of one TP32/EP4 rank (224 x [768 x 3584] + [3584 x 384]) on the GPU."""
    _sm120_guard()
    from pytest_sskj.numerics.cutlass_moe import prepare_cutlass_weights

    s = KIMI_EP4
    weights = random_moe_weights(s.experts_local, s.hidden, s.inter_local, seed=0, device="cuda")
    return weights, prepare_cutlass_weights(weights)


def kimi_tokens(m: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """bf16 latent input [m, 3584] and top-16-of-896 routing (global ids, renormalized weights)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, KIMI_K3.num_experts, generator=g)
    bias = torch.randn(KIMI_K3.num_experts, generator=g) * 0.05
    topk_w, ids = route(logits, KIMI_K3.top_k, bias)
    x = torch.randn(m, KIMI_K3.latent_size, generator=g).to(torch.bfloat16)
    return x.cuda(), ids.cuda(), topk_w.cuda()


def _best_rank(ids: torch.Tensor) -> int:
    counts = [int((global_to_local(ids, r, KIMI_EP4.experts_local) >= 0).sum()) for r in range(KIMI_EP4.ep)]
    return max(range(KIMI_EP4.ep), key=lambda r: counts[r])


def _kernel(x: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, prepared: Any, rank: int, **kw: Any) -> torch.Tensor:
    from pytest_sskj.numerics.cutlass_moe import flashinfer_cutlass_moe

    return flashinfer_cutlass_moe(x, ids, w, prepared, ep_rank=rank, ep_size=KIMI_EP4.ep, **kw)


@pytest.mark.gpu(arch="sm120")
@pytest.mark.parametrize("m", [1, 128], ids=["decode_m1", "prefill_m128"])
def test_kimi_cutlass_plumbing_bit_equal_to_direct_call(kimi_rank: tuple[MoeWeights, Any], m: int) -> None:
    import flashinfer
    from flashinfer.fused_moe import ActivationType, cutlass_fused_moe

    weights, prepared = kimi_rank
    x, ids, topk_w = kimi_tokens(m, seed=10 + m)
    rank = _best_rank(ids)
    ours = _kernel(x, ids, topk_w, prepared, rank)
    # SGLang's recipe, built independently: reorder_w1w3_to_w3w1 + block_scale_interleave (no padding at Kimi sizes)
    w13 = swap_halves(weights.w13, dim=1)
    s13 = flashinfer.block_scale_interleave(swap_halves(weights.w13_scale, dim=1)).reshape_as(weights.w13_scale)
    s2 = flashinfer.block_scale_interleave(weights.w2_scale.contiguous()).reshape_as(weights.w2_scale)
    assert_bitwise_equal(prepared.w13.weight, w13, what="relayout w13 bytes vs reorder_w1w3_to_w3w1")
    assert_bitwise_equal(prepared.w13.scale, s13, what="relayout w13 scales vs block_scale_interleave")
    assert_bitwise_equal(prepared.w2.scale, s2, what="relayout w2 scales vs block_scale_interleave")
    xq, xsf = flashinfer.mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32)
    e = KIMI_EP4.experts_local
    ones = torch.ones(e, dtype=torch.float32, device="cuda")
    direct = cutlass_fused_moe(
        xq, ids, topk_w, w13.view(torch.int64), weights.w2.view(torch.int64), torch.bfloat16,
        quant_scales=[s13.view(torch.int32), ones, s2.view(torch.int32), ones], input_sf=xsf,
        ep_size=KIMI_EP4.ep, ep_rank=rank, use_mxfp8_act_scaling=True, activation_type=ActivationType.Situ,
        use_fused_finalize=False, situ_beta=torch.full((e,), 4.0, device="cuda"),
        situ_linear_beta=torch.full((e,), 25.0, device="cuda"),
    )  # fmt: skip
    direct = direct[0] if isinstance(direct, (list, tuple)) else direct
    assert_bitwise_equal(ours, direct, what=f"M={m} adapter vs direct cutlass_fused_moe")


@pytest.mark.gpu(arch="sm120")
@pytest.mark.parametrize("m", [1, 128], ids=["decode_m1", "prefill_m128"])
def test_kimi_cutlass_numerics_and_situ_negative_controls(kimi_rank: tuple[MoeWeights, Any], m: int) -> None:
    weights, prepared = kimi_rank
    x, ids, topk_w = kimi_tokens(m, seed=20 + m)
    rank = _best_rank(ids)
    out = _kernel(x, ids, topk_w, prepared, rank)
    emul = moe_reference(x, ids, topk_w, weights, ep_rank=rank, mode=MoeMode.FLASHINFER_SM120)
    exact = moe_reference(x, ids, topk_w, weights, ep_rank=rank)
    vs_emul = assert_similar(out, emul, SIMILARITY_VS_EMULATION, what=f"M={m} kernel vs SM120 emulation")
    floor = metrics(emul, exact)  # what the MXFP8 data flow itself costs on this data
    assert floor.cosine is not None and floor.nrmse is not None
    gate = Similarity(cosine_min=floor.cosine - 2e-4, nrmse_max=floor.nrmse * 1.1 + 0.002)
    vs_exact = assert_similar(out, exact, gate, what=f"M={m} kernel vs exact fp64 reference")
    print(f"M={m} rank {rank}: vs emulation {vs_emul.describe()}\n  vs exact {vs_exact.describe()}")
    for label, ref in (
        ("SiTU beta/lambda = 5/18", moe_reference(x, ids, topk_w, weights, ep_rank=rank, mode=MoeMode.FLASHINFER_SM120,
                                                  situ_beta=5.0, situ_linear_beta=18.0)),
        ("plain SwiGLU", moe_reference(x, ids, topk_w, weights, ep_rank=rank, mode=MoeMode.FLASHINFER_SM120,
                                       activation="swiglu")),
    ):  # fmt: skip
        with pytest.raises(NumericsMismatch):
            assert_similar(out, ref, SIMILARITY_VS_EMULATION, what=f"negative control {label}")
    # per-expert tensors are honoured: the kernel run with 5/18 matches the 5/18 reference, not the default one
    e = KIMI_EP4.experts_local
    out518 = _kernel(x, ids, topk_w, prepared, rank, situ_beta=torch.full((e,), 5.0, device="cuda"),
                     situ_linear_beta=torch.full((e,), 18.0, device="cuda"))  # fmt: skip
    ref518 = moe_reference(x, ids, topk_w, weights, ep_rank=rank, mode=MoeMode.FLASHINFER_SM120, situ_beta=5.0,
                           situ_linear_beta=18.0)  # fmt: skip
    assert_similar(out518, ref518, SIMILARITY_VS_EMULATION, what="kernel with per-expert 5/18")
    with pytest.raises(NumericsMismatch):
        assert_similar(out518, emul, SIMILARITY_VS_EMULATION, what="5/18 kernel vs 4/25 reference")


@pytest.mark.gpu(arch="sm120")
def test_kimi_cutlass_every_ep_rank(kimi_rank: tuple[MoeWeights, Any]) -> None:
    weights, prepared = kimi_rank
    x, ids, topk_w = kimi_tokens(32, seed=31)
    for rank in range(KIMI_EP4.ep):
        out = _kernel(x, ids, topk_w, prepared, rank)
        emul = moe_reference(x, ids, topk_w, weights, ep_rank=rank, mode=MoeMode.FLASHINFER_SM120)
        no_local = (global_to_local(ids, rank, KIMI_EP4.experts_local) < 0).all(dim=-1)
        assert int((out[no_local] != 0).sum()) == 0, f"rank {rank}: tokens without local experts must give zeros"
        assert_similar(out[~no_local], emul[~no_local], SIMILARITY_VS_EMULATION, what=f"EP rank {rank}")


@pytest.mark.gpu(arch="sm120")
def test_kimi_cutlass_non_contiguous_input(kimi_rank: tuple[MoeWeights, Any]) -> None:
    import flashinfer

    _, prepared = kimi_rank
    x, ids, topk_w = kimi_tokens(64, seed=41)
    wide = torch.zeros((64, 2 * KIMI_K3.latent_size), dtype=torch.bfloat16, device="cuda")
    wide[:, KIMI_K3.latent_size :] = x
    view = wide[:, KIMI_K3.latent_size :]  # row stride 7168: a chunked-prefill-like strided slice
    assert not view.is_contiguous()
    rejection = ""
    try:  # FlashInfer 0.7.x rejects strided input (CHECK_CONTIGUOUS): why the adapter copies first
        direct_q, _ = flashinfer.mxfp8_quantize(view, is_sf_swizzled_layout=True, alignment=32)
    except Exception as exc:
        rejection = str(exc)
    if rejection:
        assert "contiguous" in rejection, f"strided input rejected without saying why: {rejection}"
    else:  # a FlashInfer that accepts strides must not change the bits
        ref_q, _ = flashinfer.mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32)
        assert_bitwise_equal(direct_q, ref_q, what="mxfp8_quantize on a strided view")
    rank = _best_rank(ids)
    assert_bitwise_equal(
        _kernel(view, ids, topk_w, prepared, rank),
        _kernel(x, ids, topk_w, prepared, rank),
        what="strided vs contiguous",
    )


@pytest.mark.gpu(arch="sm120")
def test_kimi_cutlass_cuda_graph_replay_equals_eager(kimi_rank: tuple[MoeWeights, Any]) -> None:
    _, prepared = kimi_rank
    x, ids, topk_w = kimi_tokens(16, seed=51)
    rank = _best_rank(ids)
    static_x = x.clone()
    graph, out = _graph_capture(lambda: _kernel(static_x, ids, topk_w, prepared, rank))
    fresh = kimi_tokens(16, seed=52)[0]
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, _kernel(fresh, ids, topk_w, prepared, rank), what="CUTLASS MoE graph replay vs eager")


# ----------------------------------------------------------------------------- SGLang attention residual gate
def test_sm120_attention_residual_gate_excludes_sm120(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        import sglang.srt.layers.attn_residual as ar
    except Exception as exc:
        pytest.skip(f"sglang not importable ({type(exc).__name__}: {exc})")
    expected = {(9, 0): False, (10, 0): True, (10, 3): True, (11, 0): True, (12, 0): False, (12, 1): False}
    gate = getattr(ar, "_supports_attn_res_tma", None)
    if gate is not None:
        seen = {cap: bool(gate(cap)) for cap in expected}
    else:
        use_fast = getattr(ar, "_use_fast", None)
        if use_fast is None:
            pytest.fail("sglang.srt.layers.attn_residual has neither _supports_attn_res_tma nor _use_fast")
        seen = {}
        for cap in expected:
            monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, c=cap: c)
            if hasattr(ar, "_FAST_SUPPORTED"):
                monkeypatch.setattr(ar, "_FAST_SUPPORTED", None)
            seen[cap] = bool(use_fast(7168))
    assert seen == expected, f"attention-residual TMA gate per capability: expected {expected}, got {seen}"
