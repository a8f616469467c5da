"""MXFP8 / MXFP4 block quantization and dequantization (block size 32, E8M0 scales), FP4 nibble packing.

This module owns the reference quantizers the acceptance tests compare kernels against. Two scale rules:

* ``ScaleMode.RCEIL`` — FlashInfer / NVIDIA (cuBLAS, TE): ``b = cvt.rp.satfinite.ue8m0(amax / max_elem)``,
  elements multiplied by ``2^(127-b)`` (``b == 0`` multiplies by 1, as FlashInfer's host quantizer and
  torchao do), clamped to ±max and rounded RNE. Scaled values can never saturate.
* ``ScaleMode.FLOOR`` — OCP MX v1.0 / torchao default: ``b = floor(log2 amax) - emax_elem`` (from the fp32
  exponent bits), elements divided by ``max(2^(b-127), 2^-126)``, then clamped (blocks with amax in
  ``(max, 2^(emax+1))·2^e`` saturate: E4M3 500 → 448, E2M1 7 → 6).

FlashInfer's GPU kernels multiply by ``rcp.approx(448)`` instead of dividing; that only matters within an ulp
of ``amax = 448·2^k`` (domain.md §3.4), which bit-exact tests avoid. The exponent is rounded up from the fp32
bits (cvt.rp semantics); torchao 0.18's eager RCEIL uses an fp32 ``ceil(log2(·))`` that rounds *down* for
amax one ulp above ``448·2^k`` when ``|k| >= 4`` (measured), the one place the two differ.
FP4 bytes hold two E2M1 codes, the even element in the low nibble (domain.md §3.5). Scales are returned
linear ``[..., K/32]`` or, on request, in the 128x4 swizzle of :mod:`pytest_sskj.numerics.swizzle`. Inputs
may be non-contiguous views; results do not depend on strides.

MXFP4 dequantization is one table gather: the value pair of every (scale byte, packed byte) combination is
evaluated once (65536 entries, :func:`fp4_scaled_table`, with the same arithmetic as an element-wise
``decode · 2^(s-127)``), and each packed byte fetches its two results with one index ``s·256 + b``
(:func:`dequantize_fp4_bytes`); on the CPU in cache-sized row chunks, so the index never goes to memory.
Inputs under 64 KiB skip the table and evaluate that arithmetic directly (:func:`dequantize_fp4_values`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from pytest_sskj.numerics.formats import (
    E2M1,
    E4M3,
    E8M0_BIAS,
    E8M0_NAN,
    FloatFormat,
    decode,
    device_table,
    e8m0_decode,
    e8m0_from_fp32_ceil,
    e8m0_from_fp32_floor,
    encode,
)
from pytest_sskj.numerics.swizzle import swizzle_128x4, unswizzle_128x4

__all__ = [
    "BLOCK",
    "MxTensor",
    "ScaleMode",
    "decode_fp4_packed",
    "dequantize_fp4_bytes",
    "dequantize_fp4_values",
    "fp4_scaled_table",
    "fused_fp4_dequantizer",
    "mx_dequantize",
    "mx_quantize",
    "mxfp4_quantize",
    "mxfp8_quantize",
    "pack_fp4",
    "unpack_fp4",
]

BLOCK = 32
_F32_MIN_NORMAL = 2.0**-126


class ScaleMode(enum.Enum):
    """How the shared E8M0 exponent is chosen from the block's absolute maximum."""

    RCEIL = "rceil"
    FLOOR = "floor"


@dataclass(frozen=True)
class MxTensor:
    """A quantized tensor: element ``codes`` (uint8; FP4 packed two per byte), E8M0 ``scale`` bytes.

    ``shape`` is the logical (unpacked) shape ``[..., K]``. ``scale`` is ``[..., K/32]`` when
    ``swizzled`` is False, else ``[..., round_up(M,128), round_up(K/32,4)]`` in 128x4 order (the flat
    buffer FlashInfer uses, viewed 2-D per leading batch).
    """

    codes: torch.Tensor
    scale: torch.Tensor
    fmt: FloatFormat
    shape: tuple[int, ...]
    swizzled: bool = False
    block_size: int = BLOCK

    def linear_scale(self) -> torch.Tensor:
        """The scale bytes as ``[..., K/32]``, undoing the swizzle when present."""
        if not self.swizzled:
            return self.scale
        rows = self.shape[-2] if len(self.shape) >= 2 else 1
        return unswizzle_128x4(self.scale, rows, self.shape[-1] // self.block_size)

    def element_codes(self) -> torch.Tensor:
        """One uint8 code per element, ``shape``-shaped (unpacks FP4)."""
        return unpack_fp4(self.codes) if self.fmt is E2M1 else self.codes


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack E2M1 codes ``[..., K]`` (uint8, values 0..15) into bytes ``[..., K/2]``: even element low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4 needs an even last dimension, got shape {tuple(codes.shape)}")
    if codes.dtype != torch.uint8:
        raise TypeError(f"pack_fp4 expects uint8 codes, got {codes.dtype}")
    return (codes[..., 0::2] & 0xF) | ((codes[..., 1::2] & 0xF) << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_fp4`: bytes ``[..., K/2]`` → codes ``[..., K]`` (low nibble first)."""
    if packed.dtype != torch.uint8:
        packed = packed.view(torch.uint8)
    low = packed & 0xF
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def decode_fp4_packed(packed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values ``[..., K]`` of packed E2M1 bytes ``[..., K/2]`` (low nibble first) with one gather, in ``dtype``.

    Every E2M1 value is exact in bf16/fp16/fp32, so the result does not depend on ``dtype`` beyond storage.
    """
    table = device_table(E2M1, packed.device).to(dtype)
    pairs = torch.stack((table.repeat(16), table.repeat_interleave(16)), dim=-1)  # [256, 2]: (low, high)
    values = pairs.index_select(0, packed.reshape(-1).view(torch.uint8).to(torch.int32))
    return values.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def _blocks(x: torch.Tensor, block_size: int) -> torch.Tensor:
    if x.dim() < 1 or x.shape[-1] % block_size:
        raise ValueError(
            f"MX quantization needs the last dimension to be a multiple of {block_size}, got shape "
            f"{tuple(x.shape)}; pad K first"
        )
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"MX quantization takes float32/bfloat16/float16 input, got {x.dtype}")
    x32 = x.to(torch.float32)
    return x32.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)


def mx_quantize(
    x: torch.Tensor,
    fmt: FloatFormat,
    mode: ScaleMode = ScaleMode.RCEIL,
    *,
    swizzle: bool = False,
    block_size: int = BLOCK,
) -> MxTensor:
    """Quantize ``x [..., K]`` to MX format ``fmt`` (E4M3 for MXFP8, E2M1 for MXFP4).

    Returns codes (FP4 packed) and E8M0 scales; see the module docstring for the two scale rules.
    """
    blocks = _blocks(x, block_size)
    amax = blocks.abs().amax(dim=-1, keepdim=True)  # NaN anywhere → NaN amax
    if mode is ScaleMode.RCEIL:
        scale = e8m0_from_fp32_ceil(amax / fmt.max_finite)
        inv = torch.ldexp(torch.ones_like(amax), (E8M0_BIAS - scale.to(torch.float32)))
        inv = torch.where(scale == 0, torch.ones_like(inv), inv)
        inv = torch.where(scale == E8M0_NAN, torch.full_like(inv, float("nan")), inv)
        scaled = blocks * inv
    elif mode is ScaleMode.FLOOR:
        scale = e8m0_from_fp32_floor(amax, fmt.emax_elem)
        as_fp32 = (scale.to(torch.int32) << 23).view(torch.float32)  # 0xFF → +Inf, as torchao
        scaled = blocks / torch.clamp(as_fp32, min=_F32_MIN_NORMAL)
    else:  # pragma: no cover - enum is closed
        raise ValueError(f"unknown scale mode {mode!r}")
    scaled = torch.clamp(scaled, min=-fmt.max_finite, max=fmt.max_finite)  # NaN passes through
    codes = encode(scaled, fmt).reshape(x.shape)
    scale = scale.squeeze(-1)
    if fmt is E2M1:
        codes = pack_fp4(codes)
    if swizzle:
        scale = swizzle_128x4(scale if scale.dim() >= 2 else scale.unsqueeze(0))
    return MxTensor(codes=codes, scale=scale, fmt=fmt, shape=tuple(x.shape), swizzled=swizzle, block_size=block_size)


def mxfp8_quantize(x: torch.Tensor, mode: ScaleMode = ScaleMode.RCEIL, *, swizzle: bool = False) -> MxTensor:
    """MXFP8 (E4M3 elements, E8M0 scales per 32). RCEIL is what ``flashinfer.mxfp8_quantize`` does."""
    return mx_quantize(x, E4M3, mode, swizzle=swizzle)


def mxfp4_quantize(x: torch.Tensor, mode: ScaleMode = ScaleMode.RCEIL, *, swizzle: bool = False) -> MxTensor:
    """MXFP4 (E2M1 elements packed two per byte, E8M0 scales per 32). RCEIL = ``flashinfer.mxfp4_quantize``."""
    return mx_quantize(x, E2M1, mode, swizzle=swizzle)


def fp4_scaled_table(
    dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu", *, arithmetic: torch.dtype | None = None
) -> torch.Tensor:
    """``[65536, 2]`` in ``dtype``: row ``s·256 + b`` = the (low, high) E2M1 values of byte ``b`` times ``2^(s-127)``.

    The products are evaluated in ``arithmetic`` (default ``dtype``): the E2M1 values and the E8M0 scale
    (:func:`~pytest_sskj.numerics.formats.e8m0_decode`, 0xFF = NaN) cast to it, multiplied, then cast to
    ``dtype``, so a gather from the table gives exactly what that element-wise arithmetic gives. Computed on
    ``device`` from the format definitions (no host data: safe inside a CUDA Graph capture).
    """
    arithmetic = dtype if arithmetic is None else arithmetic
    grid = torch.arange(256, device=device, dtype=torch.int32).repeat(256).to(torch.uint8).view(256, 256)
    values = decode_fp4_packed(grid, arithmetic).view(256, 256 * 2 // BLOCK, BLOCK)  # [scale byte, block, 32]
    scales = e8m0_decode(torch.arange(256, device=device, dtype=torch.int32).to(torch.uint8)).to(arithmetic)
    return (values * scales.view(256, 1, 1)).to(dtype).reshape(256 * 256, 2)


# Packed bytes per gather. CPU: just under ATen's parallel grain (32768 elements), so each op runs inline on the
# calling thread: in L1/L2, and with no OpenMP barrier per op (on a loaded 2-core box thousands of barriers cost
# seconds: 0.2 s vs 5-14 s for 32 Kimi experts, measured). CUDA: large, only bounding the index's memory (on an
# H200 smaller chunks lose to launch overhead: 2^22 bytes 4.0 ms, 2^26 2.6 ms for one Kimi rank, measured).
_CHUNK_BYTES = {"cpu": (1 << 15) - 1, "cuda": 1 << 29}
_THREADED_BYTES = 1 << 22  # CPU inputs from this size are split over torch.get_num_threads() Python threads
_PAIR_WORDS = {2: torch.int32, 4: torch.int64}  # one gathered word = the two values of a byte


def _fp4_rows(packed: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``packed`` as ``[rows, groups, 16]`` bytes and ``scale`` as ``[rows, groups, 1]`` bytes (shapes checked)."""
    packed = packed if packed.dtype == torch.uint8 else packed.view(torch.uint8)
    scale = scale if scale.dtype == torch.uint8 else scale.view(torch.uint8)
    half = BLOCK // 2
    if packed.dim() == 0 or packed.shape[-1] % half or scale.numel() * half != packed.numel():
        raise ValueError(
            f"packed FP4 {tuple(packed.shape)} needs a last dimension divisible by {half} bytes and one scale byte "
            f"per {half} packed bytes; got scale {tuple(scale.shape)}"
        )
    groups = packed.shape[-1] // half
    rows = packed.numel() // packed.shape[-1] if packed.shape[-1] else 0
    return packed.reshape(rows, groups, half), scale.reshape(rows, groups, 1)


def _checked(out: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if tuple(out.shape) != shape or out.dtype != dtype or not out.is_contiguous():
        got = f"{out.dtype} {tuple(out.shape)}{'' if out.is_contiguous() else ' (strided)'}"
        raise ValueError(f"out must be a contiguous {dtype} tensor of shape {shape}, got {got}")
    return out


def dequantize_fp4_bytes(
    packed: torch.Tensor, scale: torch.Tensor, table: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Packed E2M1 bytes ``[..., K/2]`` with linear E8M0 scales (``K/32`` per row) → ``[..., K]`` via ``table``.

    ``table`` is :func:`fp4_scaled_table` (its dtype is the result's). The gather index ``s·256 + b`` is built
    per row chunk (so it stays in cache, see ``_CHUNK_BYTES``) and gathered straight into the result, or into
    ``out`` (contiguous, ``[..., K]`` in the table's dtype) when given.
    """
    src, scale_rows = _fp4_rows(packed, scale)
    rows, groups, half = src.shape
    shifted = scale_rows.to(torch.int32) << 8
    shape = (*packed.shape[:-1], packed.shape[-1] * 2)
    if out is None:
        out = torch.empty(shape, dtype=table.dtype, device=packed.device)
    out = _checked(out, shape, table.dtype)
    if out.numel() == 0:
        return out
    words = _PAIR_WORDS.get(table.element_size())
    if words is not None:  # one gather per byte of one word holding both values
        flat, dst = table.contiguous().view(words).reshape(-1), out.view(words).view(rows, groups * half)
    else:
        flat, dst = table, out.view(rows, groups * half, 2)
    step = max(1, _CHUNK_BYTES.get(packed.device.type, 1 << 28) // max(groups * half, 1))
    workers = torch.get_num_threads() if not packed.is_cuda and rows * groups * half >= _THREADED_BYTES else 1
    bounds = [rows * i // workers for i in range(workers + 1)]
    parts = [(src, shifted, flat, dst, bounds[i], bounds[i + 1], step) for i in range(workers)]
    if workers == 1:
        _gather_rows(*parts[0])
    else:  # torch releases the GIL inside each op: the row ranges run in parallel, no barrier per op
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda part: _gather_rows(*part), parts))
    return out


def _gather_rows(
    src: torch.Tensor,
    shifted: torch.Tensor,
    flat: torch.Tensor,
    dst: torch.Tensor,
    first: int,
    last: int,
    step: int,
) -> None:
    """Rows ``[first, last)`` of the gather, ``step`` rows at a time through one index buffer."""
    index = torch.empty((min(step, last - first), *src.shape[1:]), dtype=torch.int32, device=src.device)
    for start in range(first, last, step):  # cache blocking over row chunks (the loop count is bytes / chunk)
        stop = min(start + step, last)
        idx = index[: stop - start]
        if src.is_cuda:  # one kernel (H200, one Kimi rank: 2.1 ms vs 2.6 ms for copy + OR)
            torch.bitwise_or(src[start:stop], shifted[start:stop], out=idx)
        else:  # two same-dtype passes in cache: the CPU's mixed-dtype broadcast OR is ~10x slower
            idx.copy_(src[start:stop])
            idx.bitwise_or_(shifted[start:stop])
        torch.index_select(flat, 0, idx.view(-1), out=dst[start:stop].reshape(-1, *flat.shape[1:]))


_TABLE_MIN_BYTES = 1 << 16  # below this, evaluating the arithmetic directly beats building the 65536-entry table


def dequantize_fp4_values(
    packed: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``decode(code) · 2^(s-127)`` evaluated in ``dtype`` for packed E2M1 bytes ``[..., K/2]`` → ``[..., K]``.

    From 64 KiB of packed bytes up one gather from :func:`fp4_scaled_table`; below, the same arithmetic the
    table is built with, applied directly (building the table costs more than that). Both give the same bits.
    """
    src, scale_rows = _fp4_rows(packed, scale)
    if src.numel() >= _TABLE_MIN_BYTES:
        return dequantize_fp4_bytes(packed, scale, fp4_scaled_table(dtype, packed.device), out=out)
    rows, groups, half = src.shape
    values = decode_fp4_packed(src, dtype).view(rows, groups, 2 * half)
    result = (values * e8m0_decode(scale_rows).to(dtype)).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    return result if out is None else _checked(out, tuple(result.shape), dtype).copy_(result)


def fused_fp4_dequantizer(table: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """:func:`dequantize_fp4_bytes` with ``table`` as one ``torch.compile`` kernel (index, gather, store fused).

    Returns ``run(packed, scale, out) -> out``, bit-identical to the eager gather. It compiles on its first call
    for each shape (tens of seconds; needs Triton on CUDA, a C++ compiler on CPU), so warm it up outside any
    CUDA Graph capture and keep the returned callable: the eager path stays the default. ``table`` must hold
    16- or 32-bit values (one word per byte).
    """
    words = _PAIR_WORDS[table.element_size()]
    flat = table.contiguous().view(words).reshape(-1)

    def gather(src: torch.Tensor, scale: torch.Tensor, dst: torch.Tensor) -> None:
        idx = src.to(torch.int64) | (scale.to(torch.int64) << 8)
        dst.copy_(flat[idx])

    compiled = torch.compile(gather, fullgraph=True, dynamic=False)

    def run(packed: torch.Tensor, scale: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        src, scale_rows = _fp4_rows(packed, scale)
        rows, groups, half = src.shape
        if not out.is_contiguous() or out.dtype != table.dtype or out.numel() != 2 * src.numel():
            raise ValueError(f"out must be a contiguous {table.dtype} tensor of {2 * src.numel()} elements")
        compiled(src, scale_rows, out.view(words).view(rows, groups, half))
        return out

    return run


def mx_dequantize(t: MxTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``value = decode(code) · 2^(scale-127)`` in fp32 (exact), then cast to ``dtype``.

    Scale byte 0 decodes to 2^-127 (OCP); FlashInfer's host decoders read it as 0 — the two agree
    whenever the block's codes are all zero, which is what RCEIL produces for such blocks.
    """
    lead, k = t.shape[:-1], t.shape[-1]
    if t.fmt is E2M1 and t.block_size == BLOCK:
        return dequantize_fp4_values(t.codes, t.linear_scale(), torch.float32).reshape(t.shape).to(dtype)
    values = decode_fp4_packed(t.codes) if t.fmt is E2M1 else decode(t.codes, t.fmt)
    scale = e8m0_decode(t.linear_scale()).reshape(*lead, k // t.block_size, 1)
    out = values.reshape(*lead, k // t.block_size, t.block_size) * scale
    return out.reshape(t.shape).to(dtype)
