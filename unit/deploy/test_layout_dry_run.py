"""The H20-style layout job as a dry run: the layout x shape matrix, every layout's command, the recommendations."""

from __future__ import annotations

from pathlib import Path

import pytest

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


def test_h20_style_layout_job_prints_the_matrix_and_every_layouts_commands(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest_inprocess(
        str(ACCEPTANCE), "--profile", "h20/dsv4-sglang-matrix", "--model-path", "/models/DSV4-Flash",
        "--layout", "tp2dp4,tp4dp2,tp8dp1", "--isl", "1K,16K", "--osl", "128,1", "--chunk", "8K",
        "--sskj-dry-run", "-p", "no:cacheprovider", "--reports-dir", str(pytester.path / "reports"),
    )  # fmt: skip
    out = res.stdout.str()
    assert res.ret == 0, out[-3000:]
    assert "layouts: tp2dp4 (TP2/DP4/EP1/PP1), tp4dp2 (TP4/DP2/EP1/PP1), tp8dp1 (TP8/DP1/EP1/PP1)" in out
    assert "shapes (grid): 1024->128, 1024->1, 16384->128, 16384->1" in out
    assert "3 layout(s) x 4 shape(s) x 1 backend(s) x 1 chunk(s) = 12 cell(s)" in out
    recs = [ln.strip() for ln in res.stdout.lines if "test_recommendation[" in ln]
    assert recs == [
        f"acceptance/test_recommendation.py::test_recommendation[isl{i}-osl{o}-auto-chunk8192]"
        for i, o in ((1024, 128), (1024, 1), (16384, 128), (16384, 1))
    ]
    serving = [ln for ln in res.stdout.lines if "test_serving[" in ln]
    assert serving == [
        "  acceptance/test_serving.py::test_serving[no-points]: no fixed-concurrency points (no --concurrency): "
        "the concurrency search measures the points"
    ], "no Kimi C=8,16 in a DSV4 job: its add16 search finds the concurrencies (listed as not applicable)"
    for lay, args in (
        ("tp2dp4", "--tp-size 2 --dp-size 4"),
        ("tp4dp2", "--tp-size 4 --dp-size 2"),
        ("tp8dp1", "--tp-size 8"),
    ):
        res.stdout.fnmatch_lines(
            [
                f"*[[]{lay} auto-chunk8192[]]*",
                f"*(rank 0, serves HTTP): *sglang.launch_server --model-path /models/DSV4-Flash {args} "
                "--moe-runner-backend auto --chunked-prefill-size 8192*",
            ]
        )
