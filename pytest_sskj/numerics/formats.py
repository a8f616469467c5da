"""Element and scale codecs of the OCP microscaling (MX) formats: E2M1, E4M3, E5M2 and E8M0.

This module owns the bit-level meaning of every code: the decode tables (computed from the format
parameters, never typed in), the round-to-nearest-even *saturating* encoder used by the MX quantizers
(finite overflow and ±Inf clamp to ±max finite; NaN becomes the format's NaN code, or ±max for E2M1,
which has no NaN), and the E8M0 scale byte (value ``2^(b-127)``, 0xFF = NaN, no zero). The encoder is an
independent implementation (exponent from the fp32 bits, ``torch.round`` on the exact quotient by the
quantum), so tests can hold it against torch's float8 casts and torchao without circularity.
See ``shared/docs/domain.md`` §3.1. torch is imported at module level: the plugin never imports this
package at startup.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "E2M1",
    "E4M3",
    "E5M2",
    "E8M0_BIAS",
    "E8M0_NAN",
    "FORMATS",
    "FloatFormat",
    "decode",
    "decode_table",
    "device_table",
    "e8m0_decode",
    "e8m0_from_fp32_ceil",
    "e8m0_from_fp32_floor",
    "encode",
]

E8M0_BIAS = 127
E8M0_NAN = 0xFF


@dataclass(frozen=True)
class FloatFormat:
    """A small IEEE-like float format (1 sign bit, ``ebits`` exponent bits, ``mbits`` mantissa bits).

    ``max_finite`` is the largest finite magnitude; ``nan_code`` is the positive NaN code or ``None`` when
    the format has no NaN (E2M1); ``inf_code`` likewise for infinities (only E5M2 has them).
    """

    name: str
    ebits: int
    mbits: int
    bias: int
    max_finite: float
    nan_code: int | None
    inf_code: int | None

    @property
    def bits(self) -> int:
        return 1 + self.ebits + self.mbits

    @property
    def sign_bit(self) -> int:
        return 1 << (self.ebits + self.mbits)

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (``1 - bias``)."""
        return 1 - self.bias

    @property
    def emax_elem(self) -> int:
        """Largest power of two not above ``max_finite`` (OCP ``emax_elem``: E4M3 8, E5M2 15, E2M1 2)."""
        return math.floor(math.log2(self.max_finite))

    @property
    def min_subnormal(self) -> float:
        return float(2.0 ** (self.emin - self.mbits))


E2M1 = FloatFormat("e2m1", ebits=2, mbits=1, bias=1, max_finite=6.0, nan_code=None, inf_code=None)
E4M3 = FloatFormat("e4m3", ebits=4, mbits=3, bias=7, max_finite=448.0, nan_code=0x7F, inf_code=None)
E5M2 = FloatFormat("e5m2", ebits=5, mbits=2, bias=15, max_finite=57344.0, nan_code=0x7F, inf_code=0x7C)
FORMATS: dict[str, FloatFormat] = {f.name: f for f in (E2M1, E4M3, E5M2)}


def _code_value(fmt: FloatFormat, code: int) -> float:
    sign = -1.0 if code & fmt.sign_bit else 1.0
    mag = code & (fmt.sign_bit - 1)
    if fmt.nan_code is not None and fmt.inf_code is None and mag == fmt.nan_code:
        return math.nan  # E4M3: S.1111.111 is the only non-finite code
    exp_field = mag >> fmt.mbits
    mant = mag & ((1 << fmt.mbits) - 1)
    if fmt.inf_code is not None and exp_field == (1 << fmt.ebits) - 1:
        return sign * math.inf if mant == 0 else math.nan  # IEEE-style top binade (E5M2)
    if exp_field == 0:
        return sign * mant * 2.0 ** (fmt.emin - fmt.mbits)
    return sign * (1.0 + mant / (1 << fmt.mbits)) * 2.0 ** (exp_field - fmt.bias)


def decode_table(fmt: FloatFormat) -> torch.Tensor:
    """fp32 values of every code ``0 .. 2^bits - 1``, computed from the format parameters."""
    return torch.tensor([_code_value(fmt, c) for c in range(1 << fmt.bits)], dtype=torch.float32)


def _decode_codes(c: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Arithmetic decode of int32 codes (device-side, no host data)."""
    negative = (c & fmt.sign_bit) != 0
    mag = c & (fmt.sign_bit - 1)
    exp_field = mag >> fmt.mbits
    mant = (mag & ((1 << fmt.mbits) - 1)).to(torch.float32)
    subnormal = mant * float(2.0 ** (fmt.emin - fmt.mbits))
    scale = torch.ldexp(torch.ones_like(mant), (exp_field - fmt.bias).to(torch.float32))
    normal = (1.0 + mant * float(2.0**-fmt.mbits)) * scale
    value = torch.where(exp_field == 0, subnormal, normal)
    if fmt.inf_code is not None:
        top = exp_field == (1 << fmt.ebits) - 1
        special = torch.where(mant == 0, torch.full_like(value, math.inf), torch.full_like(value, math.nan))
        value = torch.where(top, special, value)
    elif fmt.nan_code is not None:
        value = torch.where(mag == fmt.nan_code, torch.full_like(value, math.nan), value)
    return torch.where(negative, -value, value)


def device_table(fmt: FloatFormat, device: torch.device | str) -> torch.Tensor:
    """fp32 values of all ``2^bits`` codes, computed on ``device`` (safe inside a CUDA Graph capture)."""
    return _decode_codes(torch.arange(1 << fmt.bits, device=device, dtype=torch.int32), fmt)


def decode(codes: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """fp32 values of ``codes`` (uint8, one code per element in the low bits; no packing).

    The table is computed on the codes' device from the format parameters (no lookup table copied from
    the host), so this runs inside a CUDA Graph capture; :func:`decode_table` is the independent scalar
    formula the tests hold it against.
    """
    if codes.dtype != torch.uint8:
        raise TypeError(f"decode expects uint8 codes, got {codes.dtype}; unpack FP4 bytes with unpack_fp4 first")
    table = device_table(fmt, codes.device)
    return table[(codes & ((1 << fmt.bits) - 1)).long()]


def _fp32_exponent(mag: torch.Tensor) -> torch.Tensor:
    """Unbiased exponent ``floor(log2 |x|)`` read from the fp32 bits (fp32 subnormals give -127)."""
    return ((mag.view(torch.int32) >> 23) & 0xFF) - 127


def encode(x: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Round ``x`` to ``fmt`` with round-to-nearest-even and saturation; return uint8 codes.

    Finite values beyond ``max_finite`` and ±Inf become ±max finite (``satfinite``); NaN becomes
    ``sign | nan_code``, and for E2M1 (no NaN) ``sign | max`` **[the E2M1 NaN choice is ours: NaN has no
    E2M1 code]**. The sign of zero and of values that round to zero is kept (−0.1 → E2M1 0x8).
    Input must be float32 or narrower (bf16/fp16 are widened exactly); fp64 is refused because narrowing it
    first would round twice.
    """
    if x.dtype == torch.float64:
        raise TypeError("encode takes float32/bfloat16/float16; round fp64 data to fp32 explicitly first")
    x32 = x.to(torch.float32).contiguous()
    bits = x32.view(torch.int32)
    negative = bits < 0
    nan = torch.isnan(x32)
    mag = torch.clamp(x32.abs(), max=fmt.max_finite)  # +Inf -> max; NaN stays NaN (masked below)
    mag = torch.where(nan, torch.zeros_like(mag), mag)
    exp = torch.clamp(_fp32_exponent(mag), min=fmt.emin)
    quantum = torch.ldexp(torch.ones_like(mag), (exp - fmt.mbits).to(torch.float32))
    steps = torch.round(mag / quantum)  # exact quotient (power-of-two divisor), then RNE
    value = steps * quantum  # <= max_finite because max_finite is representable
    vexp = torch.clamp(_fp32_exponent(value), min=fmt.emin)
    normal = value >= 2.0**fmt.emin
    exp_field = torch.where(normal, vexp + fmt.bias, torch.zeros_like(vexp))
    unit = torch.ldexp(torch.ones_like(value), (vexp - fmt.mbits).to(torch.float32))
    mant_total = torch.round(value / unit).to(torch.int32)  # 2^mbits + m for normals, m for subnormals
    mant = torch.where(normal, mant_total - (1 << fmt.mbits), mant_total)
    code = (exp_field << fmt.mbits) | mant
    if fmt.nan_code is not None:
        code = torch.where(nan, torch.full_like(code, fmt.nan_code), code)
    else:
        code = torch.where(nan, torch.full_like(code, (1 << (fmt.ebits + fmt.mbits)) - 1), code)
    code = torch.where(negative, code | fmt.sign_bit, code)
    return code.to(torch.uint8).view(x.shape)


def e8m0_decode(scale: torch.Tensor) -> torch.Tensor:
    """fp32 value ``2^(b-127)`` of E8M0 bytes; byte 0 is 2^-127 (an fp32 subnormal), 0xFF is NaN."""
    if scale.dtype != torch.uint8:
        scale = scale.view(torch.uint8)
    exps = scale.to(torch.float32) - E8M0_BIAS
    out = torch.ldexp(torch.ones_like(exps), exps)
    return torch.where(scale == E8M0_NAN, torch.full_like(out, math.nan), out)


def e8m0_from_fp32_ceil(value: torch.Tensor) -> torch.Tensor:
    """``cvt.rp.satfinite.ue8m0.f32``: the smallest E8M0 byte whose value is >= ``value`` (value >= 0).

    NaN → 0xFF, +Inf and anything above 2^127 → 0xFE (satfinite), 0 and values <= 2^-127 → 0.
    This is FlashInfer's rounding of the scale (``float_to_ue8m0`` in ``thop/fp8Quantize.cpp``).
    """
    v = value.to(torch.float32).contiguous()
    bits = v.view(torch.int32)
    exp_field = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    round_up = (mant > 0) & ~((exp_field == 0) & (mant <= 0x400000))
    byte = torch.clamp(exp_field + round_up.to(torch.int32), max=0xFE)
    byte = torch.where(torch.isinf(v), torch.full_like(byte, 0xFE), byte)
    byte = torch.where(torch.isnan(v), torch.full_like(byte, E8M0_NAN), byte)
    return byte.to(torch.uint8)


def e8m0_from_fp32_floor(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """OCP MX v1.0 scale byte: ``clamp(floor(log2 amax) - emax_elem, -127, 128) + 127``, NaN → 0xFF.

    ``floor(log2 amax)`` is read from the fp32 exponent field (so an fp32 subnormal counts as 2^-127 and
    +Inf as 2^128), exactly as torchao's FLOOR mode does.
    """
    a = amax.to(torch.float32).contiguous()
    unbiased = torch.clamp(_fp32_exponent(a) - emax_elem, min=-E8M0_BIAS, max=E8M0_BIAS + 1)
    byte = (unbiased + E8M0_BIAS).to(torch.int32)
    byte = torch.where(torch.isnan(a), torch.full_like(byte, E8M0_NAN), byte)
    return byte.to(torch.uint8)
