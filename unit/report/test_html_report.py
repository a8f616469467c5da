"""The single-file Allure 3 HTML: analytics stripped, and a real render checked in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.report.html import (
    ALLURE_INSTALL,
    CHROMIUM_INSTALL,
    HtmlToolMissing,
    find_allure,
    find_chromium,
    render_html,
    strip_analytics,
)

GA = (
    '<script async src="https://www.googletagmanager.com/gtag/js?id=G-LNDJ3J7WT0"></script>\n    <script>\n'
    "        window.dataLayer = window.dataLayer || [];\n        gtag('config', 'G-LNDJ3J7WT0', {});\n    </script>"
)


def test_strip_analytics_removes_exactly_the_google_tag() -> None:
    page = f"<head><script>var keep = 1;</script>\n    {GA}\n    <script async>window.allureReportData = {{}};</script>"
    out, n = strip_analytics(page)
    assert n == 1 and "googletagmanager" not in out and "gtag" not in out
    assert "var keep = 1;" in out and "window.allureReportData" in out


def test_missing_allure_is_reported_with_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "x-result.json").write_text("{}")
    monkeypatch.setenv("SSKJ_ALLURE", str(tmp_path / "no-such-allure"))
    with pytest.raises(
        HtmlToolMissing, match=re.escape("npm install --no-audit --no-fund --prefix .ci/node allure@3.18.0")
    ):
        render_html(tmp_path / "res", tmp_path / "out.html")


def test_empty_alluredir_is_refused_before_running_anything(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=re.escape("holds no *-result.json; run pytest with --alluredir")):
        render_html(tmp_path, tmp_path / "out.html")


INNER = """
import pytest
from pytest_sskj.report import allure as sa

@pytest.mark.parametrize("backend", ["marlin", "flashinfer_mxfp4"])
def test_serving(backend, request):
    sa.labels(epic="Kimi-K3 SM120", feature="MoE backend", story="prefill throughput", severity="critical")
    sa.parameters(backend=backend, chunk=8192, C=8, repeat=0)
    for chunk, tps in ((4096, 2694.53), (8192, 2935.02), (16384, 2812.91)):
        tps = tps * (1.1 if backend != "marlin" else 1.0)
        row = {"run_id": "h", "test_id": f"s[{backend}-{chunk}]", "backend": backend, "chunk": chunk,
               "concurrency": 8, "repeat": 0, "status": "passed", "reasons": [], "findings": [],
               "client_bound": False, "input_throughput": tps, "median_ttft_ms": 44000.0, "p95_ttft_ms": 45000.0}
        request.config.hook.pytest_sskj_point_finished(config=request.config, result=row)
    sa.metric_parameters(input_throughput=tps)

def test_chunk_curve(request):
    request.config.hook.pytest_sskj_verdict(config=request.config, verdict={
        "kind": "chunk_curve", "backend": "marlin", "concurrency": 8, "best_chunk": 8192, "passed": True,
        "message": "marlin C=8: best chunk 8192"})
"""


@pytest.mark.slow  # Allure 3 through node and a real headless Chromium, end to end
@pytest.mark.skipif(
    find_allure() is None, reason=f"Allure 3 is not installed (run `{ALLURE_INSTALL}` in the repo root)"
)
@pytest.mark.skipif(find_chromium() is None, reason=f"Chromium is not installed (run `{CHROMIUM_INSTALL}`)")
def test_real_results_render_to_one_file_that_chromium_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "acceptance").mkdir()
    (tmp_path / "acceptance" / "test_inner.py").write_text(INNER)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:hypothesispytest",
            "-p",
            "no:cacheprovider",
            "--alluredir",
            "ar",
            "--reports-dir",
            "rep",
            "--run-id",
            "h1",
            "--engine",
            "sglang",
            "acceptance",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "SSKJ_REPORTS_DIR": ""},
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    out = tmp_path / "html" / "report.html"
    shot = tmp_path / "html" / "report.png"
    code = main(
        [
            "report",
            "html",
            "--alluredir",
            str(tmp_path / "ar"),
            "--out",
            str(out),
            "--check",
            "--screenshot",
            str(shot),
            "--name",
            "pytest-sskj e2e",
            "--history",
            str(tmp_path / "allure-history.jsonl"),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    html = out.read_text()
    assert "googletagmanager" not in html and len(html) > 1_000_000, f"{len(html)} bytes"
    assert not [p for p in out.parent.iterdir() if p.suffix in (".js", ".css")], "the report must be one file"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        "check passed: 3 test page(s) rendered; 'test_chunk_curve' shows metric attachment 'verdict chunk_curve'"
        in printed.out
    ), printed.out
    assert "plot 'chunk_curve_marlin_c8.png' (800x500 px)" in printed.out, printed.out
    assert len((tmp_path / "allure-history.jsonl").read_text().splitlines()) == 1, "one history entry per report"
    ids = json.loads(out.with_name("report.test-results.json").read_text())["byId"]
    assert sorted(v["name"] for v in ids.values()) == [
        "test_chunk_curve",
        "test_serving[flashinfer_mxfp4]",
        "test_serving[marlin]",
    ]
