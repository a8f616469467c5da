"""Seed 000's table (实验结果), as the twin tests compare against it."""

from __future__ import annotations

SEED000 = {  # chunk, C, backend -> input TPS, TTFT P50 s, TTFT P95 s (seed 000, 实验结果)
    (4096, 8, "marlin"): (2694.53, 48.86, 49.20),
    (4096, 8, "flashinfer_mxfp4"): (2957.23, 44.48, 44.86),
    (4096, 16, "marlin"): (2692.60, 96.25, 97.96),
    (4096, 16, "flashinfer_mxfp4"): (2960.41, 87.61, 89.04),
    (8192, 8, "marlin"): (2935.02, 43.51, 46.22),
    (8192, 8, "flashinfer_mxfp4"): (3257.96, 39.19, 41.62),
    (8192, 16, "marlin"): (2934.90, 87.09, 89.86),
    (8192, 16, "flashinfer_mxfp4"): (3260.14, 78.39, 80.88),
    (16384, 8, "marlin"): (2812.91, 45.47, 45.86),
    (16384, 8, "flashinfer_mxfp4"): (3027.50, 42.27, 42.63),
    (16384, 16, "marlin"): (2812.33, 90.97, 91.36),
    (16384, 16, "flashinfer_mxfp4"): (3027.34, 84.52, 84.85),
}
