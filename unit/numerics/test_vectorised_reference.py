"""The vectorised relayout / swizzle / FP4 dequantize are bit-exact with the frozen pre-vectorisation oracle.

The oracle is ``legacy_numerics.py`` beside this file (the old code, copied verbatim). Equality is shown on
every (E8M0 scale byte, packed byte) pair — all 16 E2M1 codes with -0, scale 0x00 (subnormal results), 0xFE
(overflow to Inf) and 0xFF (NaN) — on odd and strided shapes that need padding to 128 / 4, and on one whole
Kimi-K3 TP32/EP4 rank (224 x 768 x 3584) against CRC-32 digests of the oracle's output on that input, recorded
when the fast code landed (running the oracle itself at that size takes 20-30 s on two cores; a slice of the
same input is compared with the live oracle below, and the benchmark compares the two at full size).
"""

from __future__ import annotations

import zlib

import pytest

torch = pytest.importorskip("torch")

import legacy_numerics as legacy  # noqa: E402  (unit/numerics is on sys.path: rootdir-relative test modules)

from pytest_sskj.numerics.formats import E2M1  # noqa: E402
from pytest_sskj.numerics.moe import dequantize_fp4  # noqa: E402
from pytest_sskj.numerics.mx import (  # noqa: E402
    MxTensor,
    dequantize_fp4_bytes,
    fp4_scaled_table,
    fused_fp4_dequantizer,
    mx_dequantize,
)
from pytest_sskj.numerics.relayout import (  # noqa: E402
    copy_bytes,
    cutlass_w2_to_kimi,
    cutlass_w13_to_kimi,
    kimi_w2_to_cutlass,
    kimi_w13_to_cutlass,
)
from pytest_sskj.numerics.shapes import kimi_k3_rank_shapes  # noqa: E402
from pytest_sskj.numerics.swizzle import swizzle_128x4, unswizzle_128x4  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible)")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, needs_cuda])]
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's storage as integers: equality of these is bit equality (NaN payloads and -0 included)."""
    return t.contiguous().view(BITS[t.element_size()])


def assert_bit_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: got {actual.dtype} {tuple(actual.shape)}, expected {expected.dtype} {tuple(expected.shape)}"
    )
    differ = bits(actual) != bits(expected)
    count = int(differ.sum())
    if count:
        first = tuple(int(i) for i in torch.nonzero(differ)[0])
        raise AssertionError(
            f"{what}: {count}/{differ.numel()} elements differ from the oracle, first at {first}: "
            f"{actual[first].item()!r} ({int(bits(actual)[first]):#x}) vs {expected[first].item()!r} "
            f"({int(bits(expected)[first]):#x})"
        )


def every_scale_and_byte(device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``s`` holds every byte 0..255 (each twice, shuffled) under scale byte ``s``: all 65536 pairs."""
    g = torch.Generator().manual_seed(11)
    order = torch.stack([torch.randperm(512, generator=g) % 256 for _ in range(256)]).to(torch.uint8)
    scale = torch.arange(256, dtype=torch.uint8).view(256, 1).expand(256, 512 // 16).contiguous()
    return order.to(device), scale.to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_every_scale_and_byte_dequantizes_like_the_oracle(device: str, dtype: torch.dtype) -> None:
    packed, scale = every_scale_and_byte(device)
    assert_bit_equal(dequantize_fp4(packed, scale, dtype), legacy.dequantize_fp4(packed, scale, dtype), f"{dtype}")
    mx = MxTensor(codes=packed, scale=scale, fmt=E2M1, shape=(256, 1024))
    assert_bit_equal(mx_dequantize(mx, dtype), legacy.mx_dequantize_fp4(packed, scale, dtype), f"mx {dtype}")
    small, small_scale = packed[:, :16].contiguous(), scale[:, :1].contiguous()  # 4 KiB: the direct path
    expected = legacy.dequantize_fp4(small, small_scale, dtype)
    assert_bit_equal(dequantize_fp4(small, small_scale, dtype), expected, f"direct path {dtype}")
    table = fp4_scaled_table(dtype, device)
    assert_bit_equal(dequantize_fp4_bytes(small, small_scale, table), expected, f"table path, small input {dtype}")


@pytest.mark.gpu
@needs_cuda
# torch 2.11's inductor imports torch.jit.script_method, which warns DeprecationWarning; the suite turns warnings
# into errors, and this one is torch's own (seen on the H200: BackendCompilerFailed)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_dequantizer_equals_the_oracle_on_cuda(dtype: torch.dtype) -> None:
    """The torch.compile fusion (CUDA only here: on CPU it would need a C++ toolchain and minutes)."""
    run = fused_fp4_dequantizer(fp4_scaled_table(dtype, "cuda"))
    packed, scale = every_scale_and_byte("cuda")
    out = torch.full((256, 1024), float("nan"), dtype=dtype, device="cuda")
    assert_bit_equal(run(packed, scale, out), legacy.dequantize_fp4(packed, scale, dtype), f"fused {dtype}")
    w, s = (t.cuda() for t in kimi_rank_w13(experts=4))
    big = torch.empty((4, 768, 3584), dtype=dtype, device="cuda")
    assert_bit_equal(run(w, s, big), legacy.dequantize_fp4(w, s, dtype), f"fused Kimi slice {dtype}")
    with pytest.raises(ValueError, match="out must be a contiguous"):
        run(w, s, big[:2])


def test_edge_codes_and_scales_have_the_defined_values() -> None:
    """Spot values, so that the oracle comparison cannot be vacuous: -0, subnormal, Inf and NaN results."""
    codes = torch.tensor([[0x80, 0x71, 0x0F] + [0] * 13] * 4, dtype=torch.uint8)  # (0,-0), (0.5,6), (-6,0)
    scale = torch.tensor([[127], [0], [254], [255]], dtype=torch.uint8)
    out = dequantize_fp4(codes, scale, torch.float32)
    assert out[0, :6].tolist() == [0.0, -0.0, 0.5, 6.0, -6.0, 0.0] and bool(torch.signbit(out[0, 1])), out[0, :6]
    assert out[1, 2].item() == 2.0**-128 and out[1, 3].item() == 6 * 2.0**-127, "scale 0x00 is 2^-127 (subnormal)"
    assert out[2, 2].item() == 2.0**126 and out[2, 3].item() == float("inf"), "scale 0xFE: 6·2^127 overflows"
    assert bool(torch.isnan(out[3]).all()), "scale 0xFF is NaN for every code, zero included"
    bf = dequantize_fp4(codes, scale, torch.bfloat16)
    assert int(bits(bf)[0, 1]) & 0xFFFF == 0x8000, "bf16 -0 keeps its sign bit"


ODD = [(1, 16), (3, 5, 48), (7, 1, 16), (2, 200, 160), (4, 3, 0)]


@pytest.mark.parametrize("shape", ODD, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_odd_and_strided_shapes_dequantize_like_the_oracle(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(sum(shape))
    wide = torch.randint(0, 256, (*shape[:-1], 2 * shape[-1]), generator=g, dtype=torch.uint8)
    scales = torch.randint(0, 256, (*shape[:-1], 2 * (shape[-1] // 16)), generator=g, dtype=torch.uint8)
    views = ((wide[..., : shape[-1]], scales[..., : shape[-1] // 16]), (wide[..., ::2], scales[..., 1::2]))
    for packed, scale in views:
        expected = legacy.dequantize_fp4(packed, scale, dtype)
        assert_bit_equal(dequantize_fp4(packed, scale, dtype), expected, f"{shape} view {packed.stride()}")


@pytest.mark.parametrize("columns", [512, 16], ids=["table", "direct"])
def test_out_is_written_in_place_and_checked(columns: int) -> None:
    packed, scale = (t[:, : columns // (16 if i else 1)] for i, t in enumerate(every_scale_and_byte("cpu")))
    packed, scale = packed.contiguous(), scale.contiguous()
    out = torch.full((256, 2 * columns), float("nan"), dtype=torch.bfloat16)
    result = dequantize_fp4(packed, scale, torch.bfloat16, out=out)
    assert result.data_ptr() == out.data_ptr(), "out= must be the result"
    assert_bit_equal(out, legacy.dequantize_fp4(packed, scale, torch.bfloat16), "out=")
    expected_shape = rf"out must be a contiguous torch.bfloat16 tensor of shape \(256, {2 * columns}\)"
    with pytest.raises(ValueError, match=expected_shape):
        dequantize_fp4(packed, scale, torch.bfloat16, out=torch.empty(256, 2 * columns))
    with pytest.raises(ValueError, match="strided"):
        dequantize_fp4(packed, scale, torch.bfloat16, out=torch.empty(2 * columns, 256, dtype=torch.bfloat16).t())
    with pytest.raises(ValueError, match="one scale byte per 16 packed bytes"):
        dequantize_fp4(packed, scale[:128])
    with pytest.raises(ValueError, match="divisible by 16 bytes"):
        dequantize_fp4(packed[:, :8], scale[:, :1])


def test_table_rows_are_scale_major() -> None:
    table = fp4_scaled_table(torch.float32)
    assert tuple(table.shape) == (65536, 2)
    row = table[126 * 256 + 0x7A]  # scale 2^-1, byte 0x7A: low nibble 0xA (-1), high nibble 0x7 (6)
    assert row.tolist() == [-0.5, 3.0], f"table row for (s=126, b=0x7A) is {row.tolist()}"
    packed, scale = torch.full((1, 16), 0x7A, dtype=torch.uint8), torch.full((1, 1), 126, dtype=torch.uint8)
    assert dequantize_fp4_bytes(packed, scale, table)[0, :2].tolist() == [-0.5, 3.0]


SWIZZLE = [((1, 1), ()), ((200, 3), ()), ((130, 28), (3,)), ((768, 112), (4,)), ((256, 8), (2, 2)), ((128, 4), ())]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("mk", "lead"), SWIZZLE, ids=str)
def test_swizzle_and_inverse_equal_the_formula_oracle(device: str, mk: tuple[int, int], lead: tuple[int, ...]) -> None:
    g = torch.Generator().manual_seed(mk[0] * 7 + mk[1])
    scale = torch.randint(0, 256, (*lead, *mk), generator=g, dtype=torch.uint8).to(device)
    swz = swizzle_128x4(scale)
    assert_bit_equal(swz, legacy.swizzle_128x4(scale), f"swizzle {tuple(scale.shape)}")
    assert_bit_equal(unswizzle_128x4(swz, *mk), legacy.unswizzle_128x4(swz, *mk), "unswizzle")
    assert_bit_equal(unswizzle_128x4(swz.flatten(), *mk), legacy.unswizzle_128x4(swz.flatten(), *mk), "flat")
    strided = torch.randint(0, 256, (*lead, mk[0], 2 * mk[1]), generator=g, dtype=torch.uint8).to(device)[..., 1::2]
    assert_bit_equal(swizzle_128x4(strided), legacy.swizzle_128x4(strided), "strided input")
    as_float = scale.to(torch.float32)  # any dtype: the word trick is for bytes only
    assert_bit_equal(swizzle_128x4(as_float), legacy.swizzle_128x4(as_float), "float32 swizzle")


W13 = [(3, 192, 320), (1, 64, 128), (2, 130, 96), (2, 384, 3584), (1, 1, 32)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("experts", "inter", "hidden"), W13, ids=str)
def test_w13_and_w2_relayout_equal_the_oracle(device: str, experts: int, inter: int, hidden: int) -> None:
    g = torch.Generator().manual_seed(inter + hidden)
    w = torch.randint(0, 256, (experts, 2 * inter, hidden // 2), generator=g, dtype=torch.uint8).to(device)
    s = torch.randint(0, 256, (experts, 2 * inter, hidden // 32), generator=g, dtype=torch.uint8).to(device)
    out, (lw, ls) = kimi_w13_to_cutlass(w, s), legacy.kimi_w13_to_cutlass(w, s)
    assert_bit_equal(out.weight, lw, "w13 bytes")
    assert_bit_equal(out.scale, ls, "w13 scales")
    back = cutlass_w13_to_kimi(out)
    assert torch.equal(back[0], w) and torch.equal(back[1], s), "w13 inverse"
    half_i = max(16, inter // 32 * 16)  # w2 is [E, H, I/2] with I a multiple of 32
    w2 = torch.randint(0, 256, (experts, hidden, half_i), generator=g, dtype=torch.uint8).to(device)
    s2 = torch.randint(0, 256, (experts, hidden, w2.shape[2] // 16), generator=g, dtype=torch.uint8).to(device)
    out2, (lw2, ls2) = kimi_w2_to_cutlass(w2, s2), legacy.kimi_w2_to_cutlass(w2, s2)
    assert_bit_equal(out2.weight, lw2, "w2 bytes")
    assert_bit_equal(out2.scale, ls2, "w2 scales")
    back2 = cutlass_w2_to_kimi(out2)
    assert torch.equal(back2[0], w2) and torch.equal(back2[1], s2), "w2 inverse"


def test_relayout_of_strided_and_misaligned_views_equals_the_oracle() -> None:
    """Views that forbid wide words (odd storage offset, odd strides) take the byte path, same bytes."""
    g = torch.Generator().manual_seed(5)
    base = torch.randint(0, 256, (2, 256, 161), generator=g, dtype=torch.uint8)
    w = base[:, :, 1:161]  # storage offset 1, row stride 161: no wide view possible
    s = torch.randint(0, 256, (2, 256, 11), generator=g, dtype=torch.uint8)[:, :, 1:]
    out, (lw, ls) = kimi_w13_to_cutlass(w, s), legacy.kimi_w13_to_cutlass(w, s)
    assert_bit_equal(out.weight, lw, "strided w13 bytes")
    assert_bit_equal(out.scale, ls, "strided w13 scales")
    dst = torch.zeros(3, 24, dtype=torch.uint8)
    src = torch.arange(72, dtype=torch.uint8).view(3, 24)
    copy_bytes(dst[:, 8:], src[:, :16])
    assert torch.equal(dst[:, 8:], src[:, :16]) and int(dst[:, :8].sum()) == 0, "copy_bytes moved the wrong bytes"


def crc(t: torch.Tensor, previous: int = 0) -> int:
    return zlib.crc32(memoryview(t.contiguous().view(torch.uint8).numpy()), previous)


def kimi_rank_w13(experts: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One TP32/EP4 rank's w13 bytes [224, 768, 1792] and scales [224, 768, 112] (or its first ``experts``).

    Random rows XOR a distinct byte per expert, so every scale byte value occurs and no two experts are equal.
    """
    s = kimi_k3_rank_shapes(tp=32, ep=4)
    g = torch.Generator().manual_seed(16)
    base_w = torch.randint(0, 256, s.w13[1:], generator=g, dtype=torch.uint8)
    base_s = torch.randint(0, 256, s.w13_scale[1:], generator=g, dtype=torch.uint8)
    key = torch.randperm(256, generator=g)[: s.experts_local].to(torch.uint8)
    n = s.experts_local if experts is None else experts
    return base_w ^ key[:n].view(-1, 1, 1), base_s ^ key.flip(0)[:n].view(-1, 1, 1)


# CRC-32 of the oracle's output on kimi_rank_w13(), recorded with legacy_numerics (and the library before the
# rewrite, which gave the same digests) on torch 2.13.0+cpu: inputs, relayout bytes and scales, bf16 of the rank,
# fp32 of its first 8 experts (32 experts: 0x206D4827; the whole rank in fp32, 2.5 GB: 0x3D33DEED).
GOLDEN = {"w": 0xB6D2D0F9, "s": 0xC93D82A1, "weight": 0xB654DA6D, "scale": 0x4DB67609}
GOLDEN |= {"bf16": 0x441A6B68, "fp32_8": 0xA3A5D6F4}


def test_kimi_rank_w13_relayout_and_dequantize_match_the_oracle_digests() -> None:
    w, s = kimi_rank_w13()
    seen = {"w": crc(w), "s": crc(s)}
    assert seen == {k: GOLDEN[k] for k in seen}, f"the generated input changed (torch RNG?): {seen}"
    out = kimi_w13_to_cutlass(w, s)
    seen |= {"weight": crc(out.weight), "scale": crc(out.scale)}
    del out
    buffer = torch.empty((32, *w.shape[1:-1], 2 * w.shape[-1]), dtype=torch.bfloat16)  # 176 MB, not 1.2 GB
    seen["bf16"] = 0
    for start in range(0, w.shape[0], 32):
        seen["bf16"] = crc(
            dequantize_fp4(w[start : start + 32], s[start : start + 32], torch.bfloat16, out=buffer), seen["bf16"]
        )
    seen["fp32_8"] = crc(dequantize_fp4(w[:8], s[:8]))
    wrong = {k: f"{v:#010x} (oracle {GOLDEN[k]:#010x})" for k, v in seen.items() if v != GOLDEN[k]}
    assert not wrong, f"Kimi-rank outputs differ from the oracle: {wrong}"


def test_kimi_rank_slice_equals_the_oracle_directly() -> None:
    """The digest test's input and the oracle run live, on two experts at full Kimi row / column size."""
    w, s = kimi_rank_w13(experts=2)
    out, (lw, ls) = kimi_w13_to_cutlass(w, s), legacy.kimi_w13_to_cutlass(w, s)
    assert_bit_equal(out.weight, lw, "Kimi w13 bytes")
    assert_bit_equal(out.scale, ls, "Kimi w13 scales")
    assert_bit_equal(dequantize_fp4(w, s, torch.bfloat16), legacy.dequantize_fp4(w, s, torch.bfloat16), "Kimi bf16")
