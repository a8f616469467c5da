"""summary.md: the users' table from known numbers (hand-computed medians and percentages) and verdicts."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sskj.report.summary import format_chunk, format_delta, format_ms, render_summary, summarize_points


def _r(
    backend: str,
    chunk: int,
    c: int,
    rep: int,
    tps: float | None,
    p50: float | None,
    p95: float | None,
    status: str = "passed",
    **kw: Any,
) -> dict[str, Any]:
    return {
        "backend": backend,
        "chunk": chunk,
        "concurrency": c,
        "repeat": rep,
        "status": status,
        "input_throughput": tps,
        "median_ttft_ms": p50,
        "p95_ttft_ms": p95,
        **kw,
    }


# the users' 4K / C=8 point (seeds/000: 2694.53 vs 2957.23 TPS, 48.86 s vs 44.48 s TTFT P50)
ROWS = [
    _r("marlin", 4096, 8, 0, 2690.00, 48900.0, 49300.0),
    _r("marlin", 4096, 8, 1, 2694.53, 48860.0, 49200.0),
    _r("marlin", 4096, 8, 2, 2700.10, 48800.0, 49100.0),
    _r("flashinfer_mxfp4", 4096, 8, 0, 2957.23, 44480.0, 44860.0),
    _r("flashinfer_mxfp4", 4096, 8, 1, 2950.00, 44500.0, 44900.0),
    _r("flashinfer_mxfp4", 4096, 8, 2, 2960.00, 44400.0, 44800.0),
    # a failed repeat must not move the median: 1.0 TPS would
    _r("flashinfer_mxfp4", 8192, 8, 0, 1.0, 1.0, 1.0, status="failed", reasons=["[crash] rank 3 exited -9"]),
    _r("flashinfer_mxfp4", 8192, 8, 1, 3250.0, 39000.0, 41000.0),
    _r("flashinfer_mxfp4", 8192, 8, 2, 3260.0, 39400.0, 41200.0),
    _r("marlin", 8192, 8, 0, 2935.02, 43510.0, 46220.0),
]


def test_medians_of_repeats_and_vs_baseline_match_the_users_table() -> None:
    pts = {(p.chunk, p.backend): p for p in summarize_points(ROWS, "marlin")}
    m, f = pts[(4096, "marlin")], pts[(4096, "flashinfer_mxfp4")]
    assert (m.input_throughput, m.ttft_p50_ms, m.ttft_p95_ms) == (2694.53, 48860.0, 49200.0)
    assert (f.input_throughput, f.ttft_p50_ms, f.ttft_p95_ms) == (2957.23, 44480.0, 44860.0)
    # 2957.23 / 2694.53 - 1 = +9.749 %; 44480 / 48860 - 1 = -8.964 %
    assert f.tps_vs_baseline_pct == pytest.approx(9.7494, abs=1e-4)
    assert f.ttft_vs_baseline_pct == pytest.approx(-8.9644, abs=1e-4)
    assert m.vs_baseline == "baseline"
    assert f.vs_baseline == "+9.75% TPS / \u22128.96% TTFT"
    f8 = pts[(8192, "flashinfer_mxfp4")]
    assert (f8.passed, f8.repeats, f8.input_throughput, f8.ttft_p50_ms) == (2, 3, 3255.0, 39200.0)
    # (3255 / 2935.02 - 1) = +10.90 %, (39200 / 43510 - 1) = -9.91 %
    assert f8.vs_baseline == "+10.90% TPS / \u22129.91% TTFT"


def test_table_order_is_chunk_then_concurrency_then_baseline_first() -> None:
    pts = summarize_points(ROWS, "marlin")
    assert [(p.chunk, p.backend) for p in pts] == [
        (4096, "marlin"),
        (4096, "flashinfer_mxfp4"),
        (8192, "marlin"),
        (8192, "flashinfer_mxfp4"),
    ]


def test_search_step_rows_stay_out_of_the_serving_table() -> None:
    rows = [*ROWS[:3], _r("marlin", 4096, 64, 0, 9999.0, 1.0, 1.0, kind="search")]
    assert [(p.concurrency, p.input_throughput) for p in summarize_points(rows)] == [(8, 2694.53)]


def test_no_baseline_point_gives_na_not_a_made_up_number() -> None:
    pts = summarize_points(
        [_r("flashinfer_mxfp4", 4096, 16, 0, 10.0, 1.0, 2.0), _r("marlin", 4096, 8, 0, 10.0, 1.0, 2.0)], "marlin"
    )
    lone = next(p for p in pts if p.backend == "flashinfer_mxfp4")
    assert lone.vs_baseline == "n/a" and lone.tps_vs_baseline_pct is None


def test_formatting_helpers() -> None:
    assert [format_chunk(c) for c in (4096, 8192, 16384, 1536, 512, None)] == ["4K", "8K", "16K", "1536", "512", "-"]
    assert [format_ms(v) for v in (48860.0, 812.34, None)] == ["48.86 s", "812.3 ms", "n/a"]
    assert [format_delta(v) for v in (10.956, -9.914, 0.0, None)] == ["+10.96%", "\u22129.91%", "+0.00%", "n/a"]


def test_rendered_markdown_has_the_users_columns_verdicts_searches_and_slo() -> None:
    verdicts = [
        {
            "kind": "comparison",
            "candidate": "flashinfer_mxfp4",
            "baseline": "marlin",
            "chunk": 4096,
            "concurrency": 8,
            "passed": True,
            "message": "+9.75 % input TPS, \u22128.96 % TTFT P50 (95 % CI 9.1..10.3)",
        },
        {
            "kind": "chunk_curve",
            "backend": "marlin",
            "concurrency": 8,
            "best_chunk": 8192,
            "passed": False,
            "message": "marlin C=8: best chunk 8192",
        },
        {
            "kind": "search",
            "backend": "marlin",
            "chunk": 8192,
            "mode": "step16",
            "best": 32,
            "floor": 16,
            "passed": True,
            "message": "step16: C=32",
            "steps": [
                {"concurrency": 16, "slo_ok": True},
                {"concurrency": 32, "slo_ok": True},
                {"concurrency": 48, "slo_ok": False},
            ],
        },
        {
            "kind": "slo",
            "backend": "marlin",
            "chunk": 4096,
            "concurrency": 8,
            "passed": False,
            "message": "miss",
            "gates": [
                {
                    "metric": "ttft_p95_ms",
                    "op": "<",
                    "threshold": 3000.0,
                    "value": 49200.0,
                    "passed": False,
                    "repeat": 2,
                },
                {"metric": "tpot_p95_ms", "op": "<", "threshold": 50.0, "value": None, "passed": None, "repeat": 2},
            ],
        },
    ]
    md = render_summary(
        ROWS,
        verdicts,
        manifest={
            "run_id": "r42",
            "status": "finished",
            "settings": {"engine": "sglang", "backends": ["marlin", "x"], "tp": 32, "ep": 4, "dp": 1, "pp": 1},
        },
    )
    assert "| marlin, chunk 4K, C=8 | 2 | tpot_p95_ms < 50 | n/a | n/a |" in md, "OSL=1: TPOT is not judged"
    assert md.startswith("# pytest-sskj run r42\n")
    assert "- parallel: TP32/EP4/DP1/PP1" in md
    header = "| Chunk | C | Backend | Input TPS | TTFT P50 | TTFT P95 | TPOT P50 | TPOT P95 | E2E P95 | vs baseline |"
    assert header + " Repeats passed |" in md
    na = "n/a | n/a | n/a"  # TPOT undefined at OSL 1, E2E not in these rows: n/a, never 0
    assert f"| 4K | 8 | marlin | 2694.53 | 48.86 s | 49.20 s | {na} | baseline | 3/3 |" in md
    assert (
        f"| 4K | 8 | flashinfer_mxfp4 | 2957.23 | 44.48 s | 44.86 s | {na} | +9.75% TPS / \u22128.96% TTFT | 3/3 |"
        in md
    )
    assert (
        f"| 8K | 8 | flashinfer_mxfp4 | 3255.00 | 39.20 s | 41.10 s | {na} | +10.90% TPS / \u22129.91% TTFT | 2/3 |"
        in md
    )
    assert "| flashinfer_mxfp4 | 8K | 8 | 0 | failed | [crash] rank 3 exited -9 |" in md
    assert "| comparison | flashinfer_mxfp4 vs marlin, chunk 4K, C=8 | PASS | +9.75 % input TPS" in md
    assert "| chunk_curve | marlin, C=8 | FAIL |" in md
    assert "| marlin | 8K | step16 | 32 | 16 | C=16 ok, C=32 ok, C=48 MISS |" in md
    assert "| marlin, chunk 4K, C=8 | 2 | ttft_p95_ms < 3000 | 49200 | FAIL |" in md


def test_empty_run_says_nothing_finished() -> None:
    md = render_summary([], [], manifest={}, problems=["results.json is corrupt or truncated"])
    assert "No serving point finished." in md
    assert "> - results.json is corrupt or truncated" in md


def test_pd_decode_points_show_tpot_p50_p95_as_the_users_write_them() -> None:
    """Seed 004's PD decode figure: 16K->512 C8 TPOT P50/P95 63.20/66.55 ms (medians of the passed repeats)."""
    from pytest_sskj.report.summary import medians_cells, summarize_points

    rows = [
        {"backend": "pd", "chunk": None, "concurrency": 8, "isl": 16384, "osl": 512, "status": "passed",
         "input_throughput": 6364.31, "median_ttft_ms": 20555.0, "p95_ttft_ms": 21345.0,
         "median_tpot_ms": tpot50, "p95_tpot_ms": tpot95, "p95_e2e_latency_ms": 55000.0}
        for tpot50, tpot95 in ((63.20, 66.55), (63.10, 66.40), (63.30, 66.70))
    ]  # fmt: skip
    (p,) = summarize_points(rows, "pd")
    assert medians_cells(p) == (
        "-", "8", "pd", "6364.31", "20.55 s", "21.34 s", "63.20 ms", "66.55 ms", "55.00 s", "baseline",
    ), medians_cells(p)  # fmt: skip


def test_failed_points_plots_and_the_baseline_choice_in_the_rendered_summary() -> None:
    from pathlib import Path

    rows: list[dict[str, Any]] = [
        {"backend": "a", "chunk": 4096, "concurrency": 8, "repeat": 0, "status": "passed", "input_throughput": 100.0},
        {"backend": "b", "chunk": 4096, "concurrency": 8, "repeat": 0, "status": "passed", "input_throughput": 110.0},
        {"backend": "b", "chunk": 4096, "concurrency": 8, "repeat": 1, "status": "error", "category": "oom"},
        {"backend": "b", "chunk": 4096, "concurrency": 8, "repeat": 2, "status": None},
    ]
    plots = [Path("/run/plots/throughput_vs_chunk.png"), Path("/run/plots/ttft_cdf.png")]
    md = render_summary(rows, [], manifest={"settings": "not a table"}, baseline="b", plots=plots)
    assert md.startswith("# pytest-sskj run ?\n")
    assert "| 4K | 8 | b | 110.00 |" in md and "| baseline | 1/3 |" in md, md
    assert "| 4K | 8 | a | 100.00 |" in md and "\u22129.09% TPS" in md, "the named baseline, not the first backend"
    assert "| b | 4K | 8 | 1 | error (oom) | - |" in md, md
    assert "| b | 4K | 8 | 2 |" not in md, "a row without a status is not listed as failed"
    assert "## Verdicts" not in md, "no verdicts, no verdict table"
    assert md.endswith(
        "## Plots\n\n![throughput_vs_chunk](plots/throughput_vs_chunk.png)\n![ttft_cdf](plots/ttft_cdf.png)\n"
    )
    from_settings = render_summary(rows, [], manifest={"settings": {"backends": ["b", "a"]}})
    assert "| 4K | 8 | b | 110.00 |" in from_settings and "\u22129.09% TPS" in from_settings, (
        "without --baseline the first configured backend is the baseline"
    )
