"""E2M1 / E4M3 / E5M2 / E8M0 codecs: decode tables, RNE saturating encode, known vectors and round trips."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pytest_sskj.numerics.formats import (  # noqa: E402
    E2M1,
    E4M3,
    E5M2,
    FloatFormat,
    decode,
    decode_table,
    e8m0_decode,
    e8m0_from_fp32_ceil,
    e8m0_from_fp32_floor,
    encode,
)

ALL = [pytest.param(f, id=f.name) for f in (E2M1, E4M3, E5M2)]


def test_e2m1_table_is_the_ocp_lut_with_signed_zero() -> None:
    expected = [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6]
    table = decode_table(E2M1)
    assert table.tolist() == expected, f"E2M1 table {table.tolist()}"
    assert bool(torch.signbit(table[8])), "code 8 must decode to -0.0"


@pytest.mark.parametrize(("fmt", "torch_dtype"), [(E4M3, "float8_e4m3fn"), (E5M2, "float8_e5m2")])
def test_fp8_tables_match_torch_float8_dtypes(fmt: FloatFormat, torch_dtype: str) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    theirs = codes.view(getattr(torch, torch_dtype)).to(torch.float32)
    ours = decode_table(fmt)
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs)), "NaN codes differ from torch"
    finite = ~torch.isnan(ours)
    assert torch.equal(ours[finite], theirs[finite]), f"{fmt.name} values differ from torch's {torch_dtype}"
    assert torch.equal(torch.signbit(ours[finite]), torch.signbit(theirs[finite])), "sign of zero differs"


def test_fp8_format_constants() -> None:
    t4, t5 = decode_table(E4M3), decode_table(E5M2)
    assert (t4[0x7E].item(), t4[0x01].item(), t4[0x08].item()) == (448.0, 2.0**-9, 2.0**-6)
    assert math.isnan(t4[0x7F].item()) and math.isnan(t4[0xFF].item())
    assert (t5[0x7B].item(), t5[0x01].item(), t5[0x04].item()) == (57344.0, 2.0**-16, 2.0**-14)
    assert t5[0x7C].item() == math.inf and t5[0xFC].item() == -math.inf
    assert all(math.isnan(t5[c].item()) for c in (0x7D, 0x7E, 0x7F))
    assert (E4M3.emax_elem, E5M2.emax_elem, E2M1.emax_elem) == (8, 15, 2)


@pytest.mark.parametrize("fmt", ALL)
def test_arithmetic_decode_equals_scalar_table(fmt: FloatFormat) -> None:
    codes = torch.arange(1 << fmt.bits, dtype=torch.uint8)
    ours, table = decode(codes, fmt), decode_table(fmt)
    assert torch.equal(torch.isnan(ours), torch.isnan(table)), f"{fmt.name}: NaN codes differ"
    keep = ~torch.isnan(table)
    assert torch.equal(ours[keep], table[keep]), f"{fmt.name}: device decode {ours.tolist()} vs {table.tolist()}"
    assert torch.equal(torch.signbit(ours[keep]), torch.signbit(table[keep])), f"{fmt.name}: sign of zero differs"


@pytest.mark.parametrize("fmt", ALL)
def test_every_finite_code_round_trips(fmt: FloatFormat) -> None:
    codes = torch.arange(1 << fmt.bits, dtype=torch.uint8)
    values = decode_table(fmt)
    finite = torch.isfinite(values)
    again = encode(values[finite], fmt)
    assert torch.equal(again, codes[finite]), f"{fmt.name}: encode(decode(c)) != c for some finite code"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (0.25, 0x0), (0.75, 0x2), (1.25, 0x2), (1.75, 0x4), (2.5, 0x4), (3.5, 0x6), (5.0, 0x6),  # RNE ties
        (0.3, 0x1), (2.6, 0x5), (7.0, 0x7), (1e9, 0x7), (math.inf, 0x7), (-math.inf, 0xF),  # saturation
        (-0.1, 0x8), (-0.0, 0x8), (0.0, 0x0), (-5.5, 0xF), (math.nan, 0x7),
    ],
)  # fmt: skip
def test_e2m1_known_vectors(value: float, code: int) -> None:
    got = int(encode(torch.tensor([value]), E2M1)[0])
    assert got == code, f"E2M1 encode({value}) = {got:#x}, expected {code:#x}"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (500.0, 0x7E), (464.0, 0x7E), (449.0, 0x7E), (1e30, 0x7E), (math.inf, 0x7E), (-math.inf, 0xFE),
        (288.0, 0x79), (300.0, 0x79), (250.0, 0x78), (2.0**-10, 0x00), (3 * 2.0**-10, 0x02), (2.0**-9, 0x01),
        (2.0**-6, 0x08), (-1.0, 0xB8), (math.nan, 0x7F), (-math.nan, 0xFF),
    ],
)  # fmt: skip
def test_e4m3_known_vectors(value: float, code: int) -> None:
    got = int(encode(torch.tensor([value]), E4M3)[0])
    assert got == code, f"E4M3 encode({value}) = {got:#x}, expected {code:#x}"


@pytest.mark.parametrize(("fmt", "dtype"), [(E4M3, torch.float8_e4m3fn), (E5M2, torch.float8_e5m2)])
def test_fp8_encode_matches_torch_rne_saturating_cast(fmt: FloatFormat, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(1)
    mags = torch.exp2(torch.empty(20000).uniform_(-20, math.log2(fmt.max_finite) + 1, generator=g))
    x = mags * torch.where(torch.rand(20000, generator=g) < 0.5, -1.0, 1.0)
    x = torch.clamp(x, -fmt.max_finite, fmt.max_finite)  # torch saturates finite overflow only since 2.12
    ours = encode(x, fmt)
    theirs = x.to(dtype).view(torch.uint8)
    bad = int((ours != theirs).sum())
    assert bad == 0, f"{fmt.name}: {bad}/20000 codes differ from torch's cast"


def test_encode_refuses_float64() -> None:
    with pytest.raises(TypeError, match="fp64"):
        encode(torch.zeros(2, dtype=torch.float64), E4M3)


def test_e8m0_decode_values() -> None:
    got = e8m0_decode(torch.tensor([0, 1, 126, 127, 128, 254, 255], dtype=torch.uint8))
    assert got[:6].tolist() == [2.0**-127, 2.0**-126, 0.5, 1.0, 2.0, 2.0**127]
    assert math.isnan(got[6].item()), "0xFF must decode to NaN"


@pytest.mark.parametrize(
    ("value", "byte"),
    [
        (1.0, 127), (1.0000001, 128), (0.75, 127), (0.5, 126), (2.0**-127, 0), (1.5 * 2.0**-127, 1), (0.0, 0),
        (2.0**-140, 0), (2.0**127, 254), (3e38, 254), (math.inf, 254), (math.nan, 255), (500 / 448, 128),
    ],
)  # fmt: skip
def test_e8m0_round_up_satfinite(value: float, byte: int) -> None:
    got = int(e8m0_from_fp32_ceil(torch.tensor([value], dtype=torch.float32))[0])
    assert got == byte, f"cvt.rp.satfinite.ue8m0({value}) = {got}, expected {byte}"


@pytest.mark.parametrize(
    ("amax", "emax", "byte"),
    [(500.0, 8, 127), (448.0, 8, 127), (512.0, 8, 128), (7.0, 2, 127), (8.0, 2, 128), (0.0, 8, 0), (math.nan, 8, 255)],
)
def test_e8m0_floor_ocp(amax: float, emax: int, byte: int) -> None:
    got = int(e8m0_from_fp32_floor(torch.tensor([amax]), emax)[0])
    assert got == byte, f"FLOOR scale of amax {amax} (emax {emax}) = {got}, expected {byte}"
