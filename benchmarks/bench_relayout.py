"""Benchmark: dequantize + relayout of one Kimi-K3 TP32/EP4 rank's w13 (224 x 768 x 3584 FP4 + E8M0 scales).

Times, on CPU or CUDA, (a) the CUTLASS relayout (``[gate; up]`` → ``[up; gate]``, padding, 128x4 scale
swizzle) and (b) dequantization to bf16 (what a W4A16/Marlin-style reference or a fallback materializes),
then both together. Reports median seconds over ``--repeat`` runs after one warm-up, the bytes each step must
move at minimum, and on CUDA the fraction of HBM bandwidth reached (``--hbm-tbps``, H200 ≈ 4.8 TB/s).
A benchmark prints figures; it asserts nothing. Usage::

    python benchmarks/bench_relayout.py --device cuda [--experts 224] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from pytest_sskj.numerics.moe import dequantize_fp4
from pytest_sskj.numerics.relayout import kimi_w13_to_cutlass
from pytest_sskj.numerics.shapes import kimi_k3_rank_shapes


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn: Callable[[], Any], device: str, repeat: int) -> list[float]:
    fn()  # warm-up (allocator, kernels)
    _sync(device)
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--experts", type=int, default=None, help="local experts (default: 224, TP32/EP4)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=32, help="experts dequantized per chunk (bounds memory)")
    parser.add_argument("--hbm-tbps", type=float, default=4.8, help="peak HBM bandwidth in TB/s (H200: 4.8)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    shapes = kimi_k3_rank_shapes(tp=32, ep=4)
    experts = args.experts or shapes.experts_local
    rows, half_k = shapes.w13[1], shapes.w13[2]
    device = args.device
    g = torch.Generator(device=device).manual_seed(0)
    w13 = torch.randint(0, 256, (experts, rows, half_k), generator=g, dtype=torch.uint8, device=device)
    s13 = torch.randint(118, 124, (experts, rows, half_k // 16), generator=g, dtype=torch.uint8, device=device)
    out = torch.empty((experts, rows, half_k * 2), dtype=torch.bfloat16, device=device)

    def relayout() -> None:
        kimi_w13_to_cutlass(w13, s13)

    def dequantize() -> None:
        for start in range(0, experts, args.chunk):
            stop = min(start + args.chunk, experts)
            out[start:stop] = dequantize_fp4(w13[start:stop], s13[start:stop], dtype=torch.bfloat16)

    def both() -> None:
        relayout()
        dequantize()

    in_bytes = w13.numel() + s13.numel()
    on_gpu = device.startswith("cuda")
    figures: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if on_gpu else f"cpu ({torch.get_num_threads()} threads)",
        "experts": experts,
        "w13_shape": [experts, rows, half_k * 2],
        "input_bytes": in_bytes,
    }
    steps = {
        "relayout": (relayout, 2 * in_bytes),  # read + write every byte once (padding is zero here)
        "dequantize_bf16": (dequantize, in_bytes + out.numel() * 2),
        "dequantize_plus_relayout": (both, 3 * in_bytes + out.numel() * 2),
    }
    for name, (fn, min_bytes) in steps.items():
        seconds = _time(fn, device, args.repeat)
        median_s = statistics.median(seconds)
        row: dict[str, Any] = {"median_s": median_s, "min_s": min(seconds), "min_bytes": min_bytes}
        row["effective_gbps"] = min_bytes / median_s / 1e9
        row["hbm_fraction"] = (min_bytes / median_s) / (args.hbm_tbps * 1e12) if device.startswith("cuda") else None
        figures[name] = row
        frac = "" if row["hbm_fraction"] is None else f", {100 * row['hbm_fraction']:.1f} % of {args.hbm_tbps} TB/s HBM"
        print(
            f"{name:26s} median {median_s:.4f} s (min {min(seconds):.4f} s) over {args.repeat}; "
            f"{min_bytes / 1e9:.2f} GB moved at least -> {row['effective_gbps']:.1f} GB/s{frac}"
        )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
