"""Benchmark: dequantize + relayout of one Kimi-K3 TP32/EP4 rank's w13 (224 x 768 x 3584 FP4 + E8M0 scales).

Times, on CPU or CUDA, (a) the CUTLASS relayout (``[gate; up]`` → ``[up; gate]``, padding, 128x4 scale
swizzle) and (b) dequantization to bf16 (what a W4A16/Marlin-style reference or a fallback materializes),
then both together, for the current implementation (``new``) and, in the same process and on the same data,
the frozen pre-vectorisation oracle ``unit/numerics/legacy_numerics.py`` (``legacy``; skipped with
``--no-legacy`` or when that file is absent). It also measures the copy ceiling in the same process (a
device-to-device ``copy_`` of an output-sized buffer, bytes read + written over time) and reports each step's
minimum traffic as a fraction of it; ``--hbm-tbps`` gives the datasheet fraction too. ``--compile`` adds, on
CUDA, a ``torch.compile``d fusion of the same table gather (index build + gather in one kernel). Outputs of
every variant are compared bit for bit with the new implementation's (printed, not asserted: a benchmark
prints figures; it asserts nothing). Usage::

    python benchmarks/bench_relayout.py --device cuda [--experts 224] [--repeat 5] [--compile] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from pytest_sskj.numerics.moe import dequantize_fp4
from pytest_sskj.numerics.mx import fp4_scaled_table, fused_fp4_dequantizer
from pytest_sskj.numerics.relayout import kimi_w13_to_cutlass
from pytest_sskj.numerics.shapes import kimi_k3_rank_shapes

LEGACY_DIR = Path(__file__).resolve().parents[1] / "unit" / "numerics"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(fn: Callable[[], Any], device: str, repeat: int) -> list[float]:
    fn()  # warm-up (allocator, kernels, compilation)
    _sync(device)
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        _sync(device)
        seconds.append(time.perf_counter() - start)
    return seconds


def _legacy(enabled: bool) -> ModuleType | None:
    if not enabled or not (LEGACY_DIR / "legacy_numerics.py").exists():
        return None
    sys.path.insert(0, str(LEGACY_DIR))
    return importlib.import_module("legacy_numerics")


def _compiled_dequantize(w13: torch.Tensor, s13: torch.Tensor, out: torch.Tensor) -> Callable[[], None]:
    """The library's ``torch.compile`` fusion of the same table gather (index built in registers)."""
    fused = fused_fp4_dequantizer(fp4_scaled_table(torch.bfloat16, w13.device))

    def run() -> None:
        fused(w13, s13, out)

    return run


def _copy_ceiling(nbytes: int, device: str, repeat: int) -> float:
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    seconds = _time(lambda: dst.copy_(src), device, repeat)
    return 2 * nbytes / statistics.median(seconds) / 1e9


def _steps(
    w13: torch.Tensor, s13: torch.Tensor, out: torch.Tensor, legacy: ModuleType | None, chunk: int
) -> dict[str, Callable[[], None]]:
    experts = w13.shape[0]

    def new_relayout() -> None:
        kimi_w13_to_cutlass(w13, s13)

    def new_dequantize() -> None:
        dequantize_fp4(w13, s13, dtype=torch.bfloat16, out=out)

    steps: dict[str, Callable[[], None]] = {"new relayout": new_relayout, "new dequantize_bf16": new_dequantize}
    if legacy is not None:
        old = legacy

        def legacy_relayout() -> None:
            old.kimi_w13_to_cutlass(w13, s13)

        def legacy_dequantize() -> None:
            for start in range(0, experts, chunk):
                stop = min(start + chunk, experts)
                out[start:stop] = old.dequantize_fp4(w13[start:stop], s13[start:stop], dtype=torch.bfloat16)

        steps |= {"legacy relayout": legacy_relayout, "legacy dequantize_bf16": legacy_dequantize}
    return steps


def _bit_exact(
    w13: torch.Tensor, s13: torch.Tensor, out: torch.Tensor, runs: dict[str, Callable[[], None]]
) -> dict[str, bool]:
    """Each dequantize variant's output (and the legacy relayout's) compared byte for byte with the new one's."""
    dequantize_fp4(w13, s13, dtype=torch.bfloat16, out=out)
    reference = out.view(torch.int16).clone()
    verdicts: dict[str, bool] = {}
    for name, fn in runs.items():
        out.zero_()
        fn()
        verdicts[name] = bool(torch.equal(out.view(torch.int16), reference))
    return verdicts


def _figure(
    name: str, seconds: list[float], min_bytes: int, copy_gbps: float, hbm_tbps: float | None
) -> dict[str, Any]:
    median_s = statistics.median(seconds)
    gbps = min_bytes / median_s / 1e9
    row: dict[str, Any] = {"median_s": median_s, "min_s": min(seconds), "min_bytes": min_bytes}
    row |= {"effective_gbps": gbps, "copy_fraction": gbps / copy_gbps}
    row["hbm_fraction"] = gbps / (hbm_tbps * 1e3) if hbm_tbps else None
    hbm = "" if row["hbm_fraction"] is None else f", {100 * row['hbm_fraction']:.1f} % of {hbm_tbps} TB/s HBM"
    print(
        f"{name:34s} median {median_s:.4f} s (min {min(seconds):.4f} s) over {len(seconds)}; {min_bytes / 1e9:.2f} GB "
        f"at least -> {gbps:.1f} GB/s = {100 * row['copy_fraction']:.1f} % of the measured copy{hbm}"
    )
    return row


def _add_compiled(
    steps: dict[str, Callable[[], None]], w13: torch.Tensor, s13: torch.Tensor, out: torch.Tensor
) -> None:
    try:
        compiled = _compiled_dequantize(w13, s13, out)
        compiled()  # compiles here: a failure drops the variant, not the run
        steps["compiled dequantize_bf16"] = compiled
    except Exception as exc:  # inductor / triton failures have no common base class
        print(f"torch.compile variant unavailable: {type(exc).__name__}: {exc}"[:400])


def _time_all(
    steps: dict[str, Callable[[], None]],
    min_bytes: dict[str, int],
    device: str,
    repeat: int,
    copy_gbps: float,
    hbm: float | None,
) -> dict[str, Any]:
    """relayout, dequantize and both, for each implementation present (the compiled one reuses new relayout)."""
    figures: dict[str, Any] = {}
    for impl in ("legacy", "new", "compiled"):
        rl, dq = steps.get(f"{impl} relayout", steps["new relayout"]), steps.get(f"{impl} dequantize_bf16")
        if dq is None:
            continue

        def both(rl: Callable[[], None] = rl, dq: Callable[[], None] = dq) -> None:
            rl()
            dq()

        runs = [("dequantize_bf16", dq, min_bytes["dequantize_bf16"])]
        runs.append(("dequantize_plus_relayout", both, sum(min_bytes.values())))
        if impl != "compiled":
            runs.insert(0, ("relayout", rl, min_bytes["relayout"]))
        for step, fn, nbytes in runs:
            seconds = _time(fn, device, repeat)
            figures[f"{impl} {step}"] = _figure(f"{impl} {step}", seconds, nbytes, copy_gbps, hbm)
    return figures


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--experts", type=int, default=None, help="local experts (default: 224, TP32/EP4)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=32, help="experts per legacy dequantize call (bounds memory)")
    parser.add_argument("--hbm-tbps", type=float, default=4.8, help="peak HBM bandwidth in TB/s (H200: 4.8)")
    parser.add_argument("--no-legacy", action="store_true", help="time only the current implementation")
    parser.add_argument("--compile", action="store_true", help="also time a torch.compile fusion (CUDA)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)

    shapes = kimi_k3_rank_shapes(tp=32, ep=4)
    experts = args.experts or shapes.experts_local
    rows, half_k = shapes.w13[1], shapes.w13[2]
    device = args.device
    on_gpu = device.startswith("cuda")
    g = torch.Generator(device=device).manual_seed(0)
    w13 = torch.randint(0, 256, (experts, rows, half_k), generator=g, dtype=torch.uint8, device=device)
    s13 = torch.randint(118, 124, (experts, rows, half_k // 16), generator=g, dtype=torch.uint8, device=device)
    out = torch.empty((experts, rows, half_k * 2), dtype=torch.bfloat16, device=device)
    in_bytes = w13.numel() + s13.numel()
    copy_gbps = _copy_ceiling(out.numel() * 2, device, args.repeat)
    print(f"copy ceiling (copy_ of {out.numel() * 2 / 1e9:.2f} GB, read + write) {copy_gbps:.1f} GB/s")
    figures: dict[str, Any] = {
        "device": torch.cuda.get_device_name() if on_gpu else f"cpu ({torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "experts": experts,
        "w13_shape": [experts, rows, half_k * 2],
        "input_bytes": in_bytes,
        "copy_gbps": copy_gbps,
    }
    steps = _steps(w13, s13, out, _legacy(not args.no_legacy), args.chunk)
    if args.compile and on_gpu:
        _add_compiled(steps, w13, s13, out)
    figures["bit_exact_vs_new"] = _bit_exact(w13, s13, out, {k: v for k, v in steps.items() if "dequantize" in k})
    print(f"dequantize outputs bit-identical to the new implementation's: {figures['bit_exact_vs_new']}")
    min_bytes = {"relayout": 2 * in_bytes, "dequantize_bf16": in_bytes + out.numel() * 2}
    hbm = args.hbm_tbps if on_gpu else None
    figures |= _time_all(steps, min_bytes, device, args.repeat, copy_gbps, hbm)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
