"""Numerics references of pytest-sskj: MX codecs and quantizers, 128x4 swizzle, SiTU, the Kimi-K3 MoE
reference, the [gate; up] → CUTLASS relayout, comparison helpers, Kimi per-rank shapes and the FlashInfer
capability probe. Import the submodules directly (``pytest_sskj.numerics.mx`` ...): this package imports
nothing heavy, and the plugin never imports it at startup.
"""
