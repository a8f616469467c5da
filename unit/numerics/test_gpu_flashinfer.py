"""Our MX codecs and 128x4 swizzle against FlashInfer's own implementation (GPU machine tests).

* SM100+ only: ``flashinfer.mxfp8_quantize`` / ``mxfp4_quantize`` bit-exact with our RCEIL quantizers, each
  with a negative control (zeros in → zeros out, with the output memory poisoned with 0xA5 beforehand, and a
  round trip), so a kernel that returns without running can never pass. On the H200 (SM90, FlashInfer
  0.7.2.post1) such a no-op was measured: 262110/262144 MXFP8 code bytes differed from ours, fresh outputs
  for zero input happened to be all zero, and with poisoning all 270336 output bytes stayed 0xA5.
* Any CUDA machine with FlashInfer (the H200): our encoded bytes and swizzled scales decoded by FlashInfer's
  host decoders equal our dequantization bit for bit, and ``block_scale_interleave`` equals our swizzle.
* The capability probe on the real package, and the clear error when ``situ_beta`` is missing.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics import flashinfer_probe as probe  # noqa: E402
from pytest_sskj.numerics.compare import assert_bitwise_equal  # noqa: E402
from pytest_sskj.numerics.formats import E2M1, E4M3  # noqa: E402
from pytest_sskj.numerics.moe import dequantize_fp4  # noqa: E402
from pytest_sskj.numerics.mx import ScaleMode, mx_dequantize, mx_quantize, pack_fp4, unpack_fp4  # noqa: E402
from pytest_sskj.numerics.samples import edge_blocks, random_blocks  # noqa: E402
from pytest_sskj.numerics.swizzle import swizzle_128x4  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")


@pytest.fixture(scope="module")
def flashinfer() -> ModuleType:
    info = probe.probe_flashinfer()
    if not info.importable:
        pytest.skip(f"{probe.REASON_NO_FLASHINFER} ({info.import_error})")
    import flashinfer as fi

    return fi


def quantizer_inputs() -> torch.Tensor:
    """bf16 [256, 1024]: random binades plus the bf16-safe edge blocks, exact-boundary amaxes left out."""
    x = random_blocks(256, 1024, seed=5, dtype=torch.float32, binades=(-30, 30))
    edges = edge_blocks(include_max_boundaries=False, bf16_safe=True).to(torch.bfloat16).to(torch.float32)
    flat = x.reshape(-1, 32)
    flat[: edges.shape[0]] = edges
    return flat.reshape(256, 1024).to(torch.bfloat16)


def poisoned(fn: Any, *output_bytes: int) -> Any:
    """Call ``fn`` after filling and freeing blocks of its outputs' sizes with 0xA5: the caching allocator hands
    those bytes back, so a kernel that returns without writing (what SM90 does) leaves 0xA5 behind instead of
    the zeros a fresh allocation may happen to hold (seen on the H200: fresh outputs were all zero)."""
    junk = [torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda") for n in output_bytes]
    del junk
    return fn()


def _sm100_guard() -> None:
    reason = probe.quantizer_skip_reason()
    if reason:
        pytest.skip(reason)


@pytest.mark.gpu
@needs_cuda
def test_flashinfer_mxfp8_quantize_bit_exact_with_reference(flashinfer: ModuleType) -> None:
    _sm100_guard()
    x = quantizer_inputs().cuda()
    xq, sf = flashinfer.mxfp8_quantize(x, is_sf_swizzled_layout=True, alignment=32)
    ours = mx_quantize(x.cpu(), E4M3, ScaleMode.RCEIL, swizzle=True)
    assert_bitwise_equal(xq.view(torch.uint8).cpu()[:, : x.shape[1]], ours.codes, what="MXFP8 codes vs FlashInfer")
    assert_bitwise_equal(sf.view(torch.uint8).cpu().flatten(), ours.scale.flatten(), what="MXFP8 swizzled scales")
    # negative control after a non-trivial call: a kernel that does not run leaves stale or random bytes
    zeros = torch.zeros_like(x)
    zq, zsf = poisoned(
        lambda: flashinfer.mxfp8_quantize(zeros, is_sf_swizzled_layout=True, alignment=32), xq.numel(), sf.numel()
    )
    nonzero = int((zq.view(torch.uint8) != 0).sum()) + int((zsf.view(torch.uint8) != 0).sum())
    assert nonzero == 0, f"zeros in must give zero codes and scales; got {nonzero} non-zero bytes (kernel not run?)"
    back = mx_dequantize(mx_quantize(x.cpu(), E4M3, ScaleMode.RCEIL))
    fi_back = flashinfer.mxfp8_dequantize_host(xq.view(torch.uint8).cpu(), sf.view(torch.uint8).cpu().flatten())
    assert torch.equal(fi_back, back), "FlashInfer MXFP8 round trip differs from ours"


@pytest.mark.gpu
@needs_cuda
def test_flashinfer_mxfp4_quantize_bit_exact_with_reference(flashinfer: ModuleType) -> None:
    _sm100_guard()
    x = quantizer_inputs().cuda()
    xq, sf = flashinfer.mxfp4_quantize(x)
    ours = mx_quantize(x.cpu(), E2M1, ScaleMode.RCEIL, swizzle=True)
    assert_bitwise_equal(xq.view(torch.uint8).cpu(), ours.codes, what="MXFP4 packed codes vs FlashInfer")
    assert_bitwise_equal(sf.view(torch.uint8).cpu().flatten(), ours.scale.flatten(), what="MXFP4 swizzled scales")
    zeros = torch.zeros_like(x)
    zq, zsf = poisoned(lambda: flashinfer.mxfp4_quantize(zeros), xq.numel(), sf.numel())
    nonzero = int((zq.view(torch.uint8) != 0).sum()) + int((zsf.view(torch.uint8) != 0).sum())
    assert nonzero == 0, f"zeros in must give zero codes and scales; got {nonzero} non-zero bytes (kernel not run?)"
    fi_back = flashinfer.mxfp4_dequantize(xq, sf)
    err = float((fi_back - x.float().cpu()).abs().max())
    amax = float(x.float().abs().max())
    assert err < 0.5 * amax, f"MXFP4 round trip error {err:g} is not below half the input max {amax:g}"


def _host_inputs(rows: int, cols: int, seed: int) -> torch.Tensor:
    return random_blocks(rows, cols, seed=seed, dtype=torch.bfloat16, binades=(-20, 20))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("swizzled", [True, False], ids=["swizzled", "linear"])
def test_mxfp8_dequantize_host_reads_our_encoding(flashinfer: ModuleType, swizzled: bool) -> None:
    x = _host_inputs(200, 512, seed=21)  # 200 rows: the swizzle pads to 256
    q = mx_quantize(x, E4M3, ScaleMode.RCEIL, swizzle=swizzled)
    theirs = flashinfer.mxfp8_dequantize_host(q.codes, q.scale.flatten().contiguous(), is_sf_swizzled_layout=swizzled)
    assert_bitwise_equal(
        theirs, mx_dequantize(q), what=f"mxfp8_dequantize_host ({'swizzled' if swizzled else 'linear'})"
    )
    # negative control: the same bytes read with the wrong layout flag must not match
    wrong = flashinfer.mxfp8_dequantize_host(
        q.codes, q.scale.flatten().contiguous(), is_sf_swizzled_layout=not swizzled
    )
    assert not torch.equal(wrong, mx_dequantize(q)), "decoding with the wrong scale layout still matched"


def _random_fp4(rows: int, cols: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (rows, cols // 2), generator=g, dtype=torch.uint8)
    scale = torch.randint(100, 150, (rows, cols // 32), generator=g, dtype=torch.uint8)
    scale[0, 0], scale[1, 0], scale[2, 0] = 1, 254, 127  # extreme but finite, non-zero scales
    return packed, scale


@pytest.mark.gpu
@needs_cuda
def test_mxfp4_dequantize_host_reads_our_bytes(flashinfer: ModuleType) -> None:
    """Bit-equal except the sign of zero: FlashInfer's host LUT decodes E2M1 code 8 (−0) as +0.0 (seen on the
    H200 with 0.7.2.post1: exactly the code-8 elements differed, in their sign byte); OCP and
    ``mxfp4_dequantize`` keep −0.0."""
    packed, scale = _random_fp4(300, 1024, seed=3)
    theirs = flashinfer.mxfp4_dequantize_host(packed, scale)
    ours = dequantize_fp4(packed, scale)
    negative_zero = unpack_fp4(packed) == 8
    assert_bitwise_equal(
        theirs, torch.where(negative_zero, 0.0, ours), what="mxfp4_dequantize_host vs ours (+0 for −0)"
    )
    sign_differs = int((torch.signbit(theirs) != torch.signbit(ours)).sum())
    assert sign_differs == int(negative_zero.sum()), (
        f"only the {int(negative_zero.sum())} −0 codes may differ (in sign), saw {sign_differs} sign differences"
    )
    codes = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] * 2], dtype=torch.uint8)
    one = flashinfer.mxfp4_dequantize_host(pack_fp4(codes), torch.full((1, 1), 127, dtype=torch.uint8))
    lut = [0, 0.5, 1, 1.5, 2, 3, 4, 6, 0.0, -0.5, -1, -1.5, -2, -3, -4, -6] * 2
    assert one.flatten().tolist() == lut, f"low nibble = even element: FlashInfer decoded {one.flatten().tolist()}"
    swapped = flashinfer.mxfp4_dequantize_host(pack_fp4(codes.flip(-1)), torch.full((1, 1), 127, dtype=torch.uint8))
    assert swapped.flatten().tolist() != lut, "negative control: reversed codes decoded like the original"


@pytest.mark.gpu
@needs_cuda
def test_mxfp4_dequantize_reads_our_swizzled_scales(flashinfer: ModuleType) -> None:
    packed, scale = _random_fp4(200, 3584, seed=4)  # Kimi K: 112 scale columns, 200 rows padded to 256
    theirs = flashinfer.mxfp4_dequantize(packed.cuda(), swizzle_128x4(scale).flatten().cuda())
    assert_bitwise_equal(theirs, dequantize_fp4(packed, scale), what="mxfp4_dequantize(swizzled) vs ours")
    unswizzled = flashinfer.mxfp4_dequantize(
        packed.cuda(), torch.cat([scale.flatten(), scale.new_zeros(56 * 112)]).cuda()
    )
    assert not torch.equal(unswizzled, dequantize_fp4(packed, scale)), "linear scales read as swizzled still matched"


@pytest.mark.gpu
@needs_cuda
def test_block_scale_interleave_equals_our_swizzle(flashinfer: ModuleType) -> None:
    g = torch.Generator().manual_seed(9)
    scale = torch.randint(1, 255, (3, 200, 28), generator=g, dtype=torch.uint8)  # 3 experts, rows and cols padded
    theirs = flashinfer.block_scale_interleave(scale.cuda()).cpu()
    assert_bitwise_equal(theirs, swizzle_128x4(scale).flatten(), what="block_scale_interleave [3, 200, 28]")


def _version_tuple(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def test_probe_reports_real_flashinfer(flashinfer: ModuleType) -> None:
    info = probe.probe_flashinfer()
    assert info.version and info.git_commit, f"version/commit missing from the probe: {info}"
    assert info.version == flashinfer.__version__, f"probe version {info.version} vs {flashinfer.__version__}"
    expected = _version_tuple(info.version) >= (0, 7, 0)  # CUTLASS SiTU ships from 0.7.0 on (domain.md §5.6)
    assert info.has_cutlass_situ is expected, f"FlashInfer {info.version}: has_cutlass_situ {info.has_cutlass_situ}"
    assert info.has_host_decoders, f"host decoders missing from {info.version}"


def test_missing_situ_api_gives_clear_error(flashinfer: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    import flashinfer.fused_moe as fm

    real = fm.cutlass_fused_moe

    def old_cutlass_fused_moe(  # the pre-#4460 signature: no situ_beta / situ_linear_beta
        input: Any,
        token_selected_experts: Any,
        token_final_scales: Any,
        fc1_expert_weights: Any,
        fc2_expert_weights: Any,
        output_dtype: Any,
        quant_scales: Any,
        swiglu_alpha: Any = None,
    ) -> Any:
        return real

    monkeypatch.setattr(fm, "cutlass_fused_moe", old_cutlass_fused_moe)
    assert "situ_beta" not in inspect.signature(fm.cutlass_fused_moe).parameters
    with pytest.raises(probe.FlashInferApiMissing, match="situ_beta") as err:
        probe.cutlass_situ_kwargs(4, device="cpu")
    text = str(err.value)
    for needle in ("situ_beta", "#4460", "upgrade FlashInfer", "SwigluBias", str(flashinfer.__version__)):
        assert needle in text, f"error message lacks {needle!r}: {text}"
