"""Our MXFP8/MXFP4 quantizers are bit-exact with torchao 0.18's ``to_mx`` (third-party oracle).

Both scale modes (FLOOR = OCP/torchao default, RCEIL = FlashInfer/NVIDIA), with and without the 128x4
swizzled scales (torchao's ``to_blocked``), over many random blocks spanning 80 binades and over the edge
blocks of domain.md §3.4 (amax 500 in E4M3, 7 in E2M1, zero blocks, Inf, subnormals, exact powers of two).

torchao is imported by the tests that use it (the ``ao`` fixture), not at collection: its import (torch._dynamo,
about 2.7 s here) would otherwise be paid by every xdist worker that collects ``unit/`` (issue 26).
"""

from __future__ import annotations

import types
import zlib

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics.compare import assert_bitwise_equal  # noqa: E402
from pytest_sskj.numerics.formats import E2M1, E4M3, FloatFormat  # noqa: E402
from pytest_sskj.numerics.mx import ScaleMode, mx_quantize  # noqa: E402
from pytest_sskj.numerics.samples import edge_blocks, random_blocks  # noqa: E402

FORMATS = [pytest.param(E4M3, torch.float8_e4m3fn, id="mxfp8"), pytest.param(E2M1, torch.float4_e2m1fn_x2, id="mxfp4")]
MODES = [  # torchao's ScaleCalculationMode member of the same name
    pytest.param(ScaleMode.FLOOR, "FLOOR", id="floor"),
    pytest.param(ScaleMode.RCEIL, "RCEIL", id="rceil"),
]


@pytest.fixture(scope="module")
def ao() -> types.SimpleNamespace:
    """torchao's MX modules (skips the module's tests where torchao is not installed)."""
    return types.SimpleNamespace(
        mx_tensor=pytest.importorskip("torchao.prototype.mx_formats.mx_tensor"),
        config=pytest.importorskip("torchao.prototype.mx_formats.config"),
        utils=pytest.importorskip("torchao.prototype.mx_formats.utils"),
    )


def torchao_mx(
    ao: types.SimpleNamespace, x: torch.Tensor, ao_dtype: torch.dtype, mode: str, swizzle: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    ao_mode = getattr(ao.config.ScaleCalculationMode, mode)
    scale, data = ao.mx_tensor.to_mx(x, ao_dtype, 32, ao_mode, is_swizzled_scales=swizzle)
    return scale.view(torch.uint8), data.view(torch.uint8)


@pytest.mark.parametrize(("fmt", "ao_dtype"), FORMATS)
@pytest.mark.parametrize(("mode", "ao_mode"), MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("swizzle", [False, True], ids=["linear", "swizzled"])
def test_random_blocks_bit_exact_with_torchao(
    ao: types.SimpleNamespace,
    fmt: FloatFormat,
    ao_dtype: torch.dtype,
    mode: ScaleMode,
    ao_mode: str,
    dtype: torch.dtype,
    swizzle: bool,
) -> None:
    seed = zlib.crc32(f"{fmt.name}/{mode.value}/{dtype}".encode())
    x = random_blocks(200, 1024, seed=seed, dtype=dtype)  # 6400 blocks
    ours = mx_quantize(x, fmt, mode, swizzle=swizzle)
    ao_scale, ao_data = torchao_mx(ao, x, ao_dtype, ao_mode, swizzle)
    assert_bitwise_equal(ours.codes, ao_data, what=f"{fmt.name} {mode.value} element codes")
    assert_bitwise_equal(ours.scale.flatten(), ao_scale.flatten(), what=f"{fmt.name} {mode.value} scales")


@pytest.mark.parametrize(("fmt", "ao_dtype"), FORMATS)
@pytest.mark.parametrize(("mode", "ao_mode"), MODES)
def test_edge_blocks_bit_exact_with_torchao(
    ao: types.SimpleNamespace, fmt: FloatFormat, ao_dtype: torch.dtype, mode: ScaleMode, ao_mode: str
) -> None:
    x = edge_blocks()
    ours = mx_quantize(x, fmt, mode)
    ao_scale, ao_data = torchao_mx(ao, x, ao_dtype, ao_mode, False)
    assert_bitwise_equal(ours.scale, ao_scale, what=f"{fmt.name} {mode.value} edge-block scales")
    assert_bitwise_equal(ours.codes, ao_data, what=f"{fmt.name} {mode.value} edge-block codes")


@pytest.mark.parametrize(("fmt", "ao_dtype"), FORMATS)
@pytest.mark.parametrize(("mode", "ao_mode"), MODES)
def test_infinite_blocks_bit_exact_with_torchao(
    ao: types.SimpleNamespace, fmt: FloatFormat, ao_dtype: torch.dtype, mode: ScaleMode, ao_mode: str
) -> None:
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(3))
    x[0, 5] = float("inf")
    x[1, 0] = float("-inf")
    x[2, :] = float("inf")
    ours = mx_quantize(x, fmt, mode)
    ao_scale, ao_data = torchao_mx(ao, x, ao_dtype, ao_mode, False)
    assert_bitwise_equal(ours.scale, ao_scale, what="scales of blocks holding Inf")
    assert_bitwise_equal(ours.codes, ao_data, what="codes of blocks holding Inf")


@pytest.mark.parametrize(("mode", "ao_mode"), MODES)
def test_nan_blocks_match_torchao_for_mxfp8(ao: types.SimpleNamespace, mode: ScaleMode, ao_mode: str) -> None:
    """A NaN anywhere makes the scale 0xFF in both; element codes agree (torchao's FP4 has no NaN rule)."""
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(4))
    x[0, 3] = float("nan")
    ours = mx_quantize(x, E4M3, mode)
    ao_scale, ao_data = torchao_mx(ao, x, torch.float8_e4m3fn, ao_mode, False)
    assert ours.scale[0].item() == 0xFF, f"NaN block scale: expected 0xFF, got {ours.scale[0].item():#x}"
    assert_bitwise_equal(ours.scale, ao_scale, what="scales of a NaN block")
    ours_nan = torch.isnan(ours.codes.view(torch.float8_e4m3fn).float())
    ao_nan = torch.isnan(ao_data.view(torch.float8_e4m3fn).float())
    assert torch.equal(ours_nan, ao_nan), "NaN element positions differ from torchao"
    assert_bitwise_equal(ours.codes[1:], ao_data[1:], what="codes of the finite blocks next to a NaN block")


def test_three_dimensional_swizzle_matches_to_blocked_per_batch(ao: types.SimpleNamespace) -> None:
    """[E, M, K] input: each expert's scales are swizzled on their own (rows 130 → 256, cols 3 → 4 padded)."""
    x = random_blocks(2 * 130, 96, seed=11, dtype=torch.bfloat16).reshape(2, 130, 96)
    ours = mx_quantize(x, E4M3, ScaleMode.RCEIL, swizzle=True)
    linear = mx_quantize(x, E4M3, ScaleMode.RCEIL).scale
    assert tuple(ours.scale.shape) == (2, 256, 4), f"swizzled scale shape {tuple(ours.scale.shape)}"
    for e in range(2):
        ao_scale, _ = torchao_mx(ao, x[e].contiguous(), torch.float8_e4m3fn, "RCEIL", True)
        expected = ao.utils.to_blocked(linear[e].view(torch.float8_e8m0fnu)).view(torch.uint8)
        assert_bitwise_equal(ours.scale[e].flatten(), expected, what=f"expert {e} swizzled scales vs to_blocked")
        assert_bitwise_equal(ours.scale[e].flatten(), ao_scale.flatten(), what=f"expert {e} vs to_mx(swizzled)")
