"""Plots from known data: real PNG files (signature, size), nothing drawn without data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from pytest_sskj.report.plots import (
    find_request_files,
    metric_value,
    plot_chunk_curve,
    plot_search,
    plot_throughput_vs_chunk,
    plot_ttft_cdf,
    plot_ttft_vs_concurrency,
    render_all,
    ttft_samples,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG, f"{path} does not start with the PNG signature: {data[:8]!r}"
    w, h = struct.unpack(">II", data[16:24])
    return int(w), int(h)


ROWS = [
    {
        "backend": b,
        "chunk": ch,
        "concurrency": c,
        "repeat": 0,
        "status": "passed",
        "input_throughput": 1000.0 + ch / 8 + (100 if b == "fi" else 0),
        "median_ttft_ms": 100.0 * c,
        "p95_ttft_ms": 120.0 * c,
    }
    for b in ("marlin", "fi")
    for ch in (4096, 8192, 16384)
    for c in (8, 16)
]


def test_throughput_and_ttft_plots_are_pngs(tmp_path: Path) -> None:
    a = plot_throughput_vs_chunk(ROWS, tmp_path / "a.png")
    b = plot_ttft_vs_concurrency(ROWS, tmp_path / "b.png")
    assert a is not None and b is not None
    assert _png_size(a) == (800, 500) and _png_size(b) == (800, 500)
    assert a.stat().st_size > 10_000, f"{a} is only {a.stat().st_size} bytes"


def test_chunk_curve_plot_uses_the_verdicts_points_or_falls_back_to_rows(tmp_path: Path) -> None:
    verdict = {
        "kind": "chunk_curve",
        "backend": "marlin",
        "concurrency": 8,
        "best_chunk": 8192,
        "points": [{"chunk": 4096, "input_tps": 2694.5}, {"chunk": 8192, "input_tps": 2935.0}],
    }
    a = plot_chunk_curve(verdict, tmp_path / "a.png")
    b = plot_chunk_curve({**verdict, "points": []}, tmp_path / "b.png", ROWS)
    assert a is not None and b is not None and _png_size(a) == _png_size(b) == (800, 500)
    assert plot_chunk_curve({**verdict, "points": [], "backend": "other"}, tmp_path / "c.png", ROWS) is None


def test_nothing_to_draw_returns_none_and_writes_nothing(tmp_path: Path) -> None:
    failed = [{**ROWS[0], "status": "failed"}]
    assert plot_throughput_vs_chunk(failed, tmp_path / "a.png") is None
    assert plot_ttft_cdf({"marlin": []}, tmp_path / "c.png") is None
    assert plot_search({"kind": "search", "steps": []}, tmp_path / "s.png") is None
    assert list(tmp_path.iterdir()) == []


def _records(path: Path, ttfts_s: list[float], *, warmup: int = 1) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"index": -1, "warmup": True, "t_send": 0.0, "t_first": 99.0})] * warmup
    lines += [
        json.dumps({"index": i, "warmup": False, "t_send": 10.0, "t_first": 10.0 + t, "failure": None})
        for i, t in enumerate(ttfts_s)
    ]
    lines.append(json.dumps({"index": 99, "warmup": False, "t_send": 1.0, "t_first": 2.0, "failure": "short output"}))
    lines.append('{"index": 100, "t_se')  # a crashed run's last line
    path.write_text("\n".join(lines) + "\n")


def test_ttft_samples_come_from_measured_successful_requests(tmp_path: Path) -> None:
    _records(tmp_path / "points" / "marlin-chunk4096-c8-r0" / "requests.jsonl", [0.5, 0.25])
    got = ttft_samples([tmp_path / "points" / "marlin-chunk4096-c8-r0" / "requests.jsonl"])
    assert got == [500.0, 250.0], f"expected the two measured TTFTs in ms, got {got}"
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text('{"ttft": 0.125}\n{"ttft_ms": 7.5}\n{"error": "boom", "ttft_ms": 1}\n')
    assert ttft_samples([legacy]) == [125.0, 7.5]


def test_request_files_map_to_their_rows_backend(tmp_path: Path) -> None:
    """Rows say which file is theirs (``request_file``, else their point's store file); no path matching."""
    _records(tmp_path / "points" / "flashinfer_mxfp4-chunk4096-c8-r0" / "requests.jsonl", [0.1])
    _records(tmp_path / "points" / "marlin-chunk4096-c8-r0" / "requests.jsonl", [0.2])
    _records(tmp_path / "points" / "flashinfer-chunk4096-c8-r0" / "requests.jsonl", [0.3])  # no row: not used
    rows = [
        {"backend": "flashinfer_mxfp4", "request_file": "points/flashinfer_mxfp4-chunk4096-c8-r0/requests.jsonl"},
        {"backend": "marlin", "point_id": "marlin-chunk4096-c8-r0"},
        {"backend": "flashinfer", "point_id": "flashinfer-chunk8192-c8-r0"},  # its file is missing
    ]
    found = find_request_files(tmp_path, rows)
    assert {b: [p.parent.name for p in ps] for b, ps in found.items()} == {
        "flashinfer_mxfp4": ["flashinfer_mxfp4-chunk4096-c8-r0"],
        "marlin": ["marlin-chunk4096-c8-r0"],
    }
    out = plot_ttft_cdf({b: ttft_samples(ps) for b, ps in found.items()}, tmp_path / "cdf.png")
    assert out is not None and _png_size(out) == (800, 500)


def test_search_plot_reads_the_acceptance_layers_verdict_shape(tmp_path: Path) -> None:
    verdict = {
        "kind": "search",
        "backend": "marlin",
        "chunk": 8192,
        "best": 32,
        "steps": [
            {"concurrency": c, "slo_ok": c <= 32, "metrics": {"p95_ttft_ms": 900.0 * c / 16}} for c in (16, 32, 48)
        ],
    }
    out = plot_search(verdict, tmp_path / "s.png", slo=["ttft_p95_ms<3000", "tpot_p95_ms<50"])
    assert out is not None and _png_size(out) == (800, 500)
    assert metric_value({"p95_ttft_ms": 5.0}, "ttft_p95_ms") == 5.0
    assert metric_value({"ttft_p95_ms": 6.0}, "p95_ttft_ms") == 6.0
    assert metric_value({}, "ttft_p95_ms") is None


def test_render_all_writes_every_plot_it_has_data_for(tmp_path: Path) -> None:
    _records(tmp_path / "points" / "marlin-chunk4096-c8-r0" / "requests.jsonl", [0.5])
    verdicts = [
        {
            "kind": "search",
            "backend": "marlin",
            "chunk": 8192,
            "metric": "p95_ttft_ms",
            "threshold": 3000,
            "best_concurrency": 16,
            "steps": [{"concurrency": 16, "value": 2000.0, "passed": True}],
        },
        {
            "kind": "chunk_curve",
            "backend": "marlin",
            "concurrency": 8,
            "points": [{"chunk": 4096, "input_tps": 100.0}, {"chunk": 8192, "input_tps": 120.0}],
        },
    ]
    rows = [dict(r) for r in ROWS]  # the rows name their per-request files (schema sskj-row/2)
    rows[0]["request_file"] = "points/marlin-chunk4096-c8-r0/requests.jsonl"
    written = render_all(tmp_path, rows, verdicts)
    assert sorted(p.name for p in written) == [
        "chunk_curve_marlin_c8.png",  # drawn at the end too: the verdict-time plot is drawn only for Allure
        "search_0_marlin_8192.png",
        "throughput_vs_chunk.png",
        "ttft_cdf.png",
        "ttft_vs_concurrency.png",
    ]
    assert all(p.read_bytes()[:8] == PNG for p in written)


def test_search_plot_keeps_the_axis_on_the_data_when_the_slo_is_far_above_it(tmp_path: Path) -> None:
    """Issue 27: a 30000 ms SLO over 20-100 ms steps flattened the data onto zero; the axis now follows the data
    (the threshold is written at the top edge), and the concurrency ticks are the measured integers."""
    from matplotlib.figure import Figure

    from pytest_sskj.report import plots

    seen: dict[str, object] = {}
    real_save = plots._save

    def spy(fig: Figure, out: Path) -> Path:
        ax = fig.axes[0]
        seen.update(ylim=ax.get_ylim(), xticks=[t.get_text() for t in ax.get_xticklabels()], title=ax.get_title())
        return real_save(fig, out)

    verdict = {
        "kind": "search",
        "backend": "parallel",
        "chunk": 256,
        "best": 4,
        "steps": [{"concurrency": c, "p95_ttft_ms": v, "passed": True} for c, v in ((1, 20.0), (2, 45.0), (4, 100.0))],
    }
    orig = plots._save
    plots._save = spy  # type: ignore[assignment]
    try:
        out = plots.plot_search(verdict, tmp_path / "s.png", ["p95_ttft_ms<30000"], run_id="r7")
    finally:
        plots._save = orig  # type: ignore[assignment]
    assert out is not None
    ylim = seen["ylim"]
    assert isinstance(ylim, tuple) and ylim[1] < 200, f"the y axis must follow the data (max 100 ms), got {ylim}"
    assert seen["xticks"] == ["1", "2", "4"], seen["xticks"]
    assert "run r7" in str(seen["title"]) and "vs the SLO" in str(seen["title"]), seen["title"]
