"""The reporter plugin in a real pytest session (pytester): result files, summary, plots, outcomes,
manifest facts, Allure labels/parameters/attachments and the Allure extras in --alluredir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

INNER = """
import pytest
from pytest_sskj.report import allure as sa
from pytest_sskj.report.categories import SLO

def _row(backend, chunk, rep, tps, ttft):
    return {"run_id": "x", "test_id": f"serve[{backend}-{chunk}-r{rep}]", "engine": "embedded", "backend": backend,
            "chunk": chunk, "concurrency": 8, "repeat": rep, "isl": 512, "osl": 16, "requests": 40,
            "status": "passed", "reasons": [], "findings": [], "client_bound": False, "completed": 40,
            "failed": 0, "input_throughput": tps, "median_ttft_ms": ttft, "p95_ttft_ms": ttft * 1.1,
            "p95_tpot_ms": None}

@pytest.mark.parametrize("backend", ["marlin", "flashinfer_mxfp4"])
def test_serving(backend, request):
    sa.labels(epic="Kimi-K3 SM120", feature="MoE backend", story="prefill throughput", severity="critical")
    sa.parameters(backend=backend, chunk=4096, C=8, repeat=0)
    with sa.step("bench"):
        base = 1000.0 if backend == "marlin" else 1100.0
        for chunk in (4096, 8192):
            for rep in range(2):
                row = _row(backend, chunk, rep, base + chunk / 100 + rep, 500.0 - rep)
                request.config.hook.pytest_sskj_point_finished(config=request.config, result=row)
    sa.metric_parameters(input_throughput=base + 40.96, median_ttft_ms=499.5, p95_tpot_ms=None)
    sa.attach_csv("requests", [{"i": 0, "ttft_ms": 12.5}, {"i": 1, "ttft_ms": None}])
    sa.attach_text("launch command", "python -m sglang.launch_server --tp 1")

def test_chunk_curve(request):
    request.config.hook.pytest_sskj_verdict(config=request.config, verdict={
        "kind": "chunk_curve", "backend": "marlin", "concurrency": 8, "best_chunk": 8192, "passed": True,
        "message": "marlin C=8: best chunk 8192",
        "points": [{"chunk": 4096, "input_tps": 1041.46}, {"chunk": 8192, "input_tps": 1082.42}]})

def test_search(request):
    request.config.hook.pytest_sskj_verdict(config=request.config, verdict={
        "kind": "search", "backend": "marlin", "chunk": 4096, "mode": "double", "best": 16, "passed": True,
        "message": "double: C=16", "steps": [{"concurrency": c, "slo_ok": c <= 16,
                                              "metrics": {"p95_ttft_ms": 200.0 * c}} for c in (8, 16, 32)]})

def test_slo_miss():
    pytest.fail(SLO + " ttft_p95_ms=4000 >= 3000")
"""


def _results(alluredir: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(alluredir.glob("*-result.json"))]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """One real pytest run (a subprocess, as a user runs it, with two xdist workers emitting rows and
    verdicts into the same run directory), shared by the checks below."""
    root = tmp_path_factory.mktemp("inner")
    (root / "acceptance").mkdir()
    (root / "acceptance" / "test_inner.py").write_text(INNER)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:hypothesispytest",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            "--alluredir",
            "allure-results",
            "--reports-dir",
            "rep",
            "--run-id",
            "r1",
            "--engine",
            "sglang",
            "acceptance",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return res, root / "rep" / "r1", root / "allure-results"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_rows_verdicts_summary_plots_and_outcomes_are_written(
    session: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    res, run_dir, _ = session
    assert res.returncode == 1 and "1 failed, 4 passed" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    rows = json.loads((run_dir / "results.json").read_text())["rows"]
    assert len(rows) == 8, f"expected 2 backends x 2 chunks x 2 repeats, got {len(rows)}"
    assert (run_dir / "results.csv").read_text().count("\n") == 9
    assert [v["kind"] for v in json.loads((run_dir / "verdicts.json").read_text())["verdicts"]] == [
        "chunk_curve",
        "search",
    ]
    md = (run_dir / "summary.md").read_text()
    assert "- status: finished" in md, "the final summary must be written after the manifest is completed"
    # marlin 4K: median(1040.96, 1041.96) = 1041.46; fi 4K: 1141.46 -> +9.60 %; TTFT 499.5 both -> +0.00 %
    # TPOT P50/P95 and E2E P95 columns: n/a where the rows do not define them (never 0)
    assert "| 4K | 8 | marlin | 1041.46 | 499.5 ms | 549.5 ms | n/a | n/a | n/a | baseline | 2/2 |" in md
    assert (
        "| 4K | 8 | flashinfer_mxfp4 | 1141.46 | 499.5 ms | 549.5 ms | n/a | n/a | n/a | +9.60% TPS / +0.00% TTFT | 2/2 |"  # noqa: E501
        in md
    )
    plots = sorted(p.name for p in (run_dir / "plots").glob("*.png"))
    assert plots == [
        "chunk_curve_marlin_c8.png",
        "search_0_marlin_4096.png",
        "throughput_vs_chunk.png",
        "ttft_vs_concurrency.png",
    ], plots
    assert "![throughput_vs_chunk](plots/throughput_vs_chunk.png)" in md
    out = json.loads((run_dir / "outcomes.json").read_text())
    assert out["complete"] is True and out["exitstatus"] == 1
    by_id = {t["nodeid"]: t for t in out["tests"]}
    assert by_id["acceptance/test_inner.py::test_slo_miss"]["outcome"] == "failed"
    assert by_id["acceptance/test_inner.py::test_slo_miss"]["message"].startswith("Failed: [slo] ttft_p95_ms=4000")
    assert {t["suite"] for t in out["tests"]} == {"acceptance"}
    assert by_id["acceptance/test_inner.py::test_serving[marlin]"]["markers"] == ["parametrize"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["report"]["rows"] == 8 and manifest["report"]["outcomes"] == "outcomes.json"
    assert manifest["report"]["results_csv"] == "results.csv"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_allure_results_carry_labels_parameters_steps_and_attachments(
    session: tuple[subprocess.CompletedProcess[str], Path, Path],
) -> None:
    _, _, alluredir = session
    results = {r["name"]: r for r in _results(alluredir)}
    t = results["test_serving[flashinfer_mxfp4]"]
    labels = {(lab["name"], lab["value"]) for lab in t["labels"]}
    assert {
        ("epic", "Kimi-K3 SM120"),
        ("feature", "MoE backend"),
        ("story", "prefill throughput"),
        ("severity", "critical"),
    } <= labels
    params = {p["name"]: p for p in t["parameters"]}
    assert params["chunk"]["value"] == "4096" and not params["chunk"].get("excluded")
    assert params["input_throughput"] == {"name": "input_throughput", "value": "1140.96", "excluded": True}
    assert params["p95_tpot_ms"]["value"] == "'n/a'" and params["p95_tpot_ms"]["excluded"] is True
    assert [s["name"] for s in t["steps"]] == ["bench"]
    step_atts = [a["name"] for a in t["steps"][0].get("attachments", [])]
    assert step_atts[0] == "result row flashinfer_mxfp4 chunk 4096 C=8 r0" and len(step_atts) == 4
    names = {a["name"]: a for a in t["attachments"]}
    assert names["requests"]["type"] == "text/csv"
    assert (alluredir / names["requests"]["source"]).read_text() == "i,ttft_ms\n0,12.5\n1,\n"
    assert names["launch command"]["type"] == "text/plain"
    curve = results["test_chunk_curve"]
    types = sorted(a["type"] for a in curve["attachments"])
    assert types == ["application/json", "image/png"], f"verdict JSON and its plot expected, got {types}"
    png = next(a for a in curve["attachments"] if a["type"] == "image/png")
    assert (alluredir / png["source"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_history_id_ignores_metric_parameters_but_not_configuration(pytester: pytest.Pytester) -> None:
    """Same configuration with other metric values keeps Allure's historyId; another backend changes it."""
    pytester.makepyfile(
        test_h="""
import os
from pytest_sskj.report import allure as sa
def test_point():
    sa.parameters(backend=os.environ["B"], chunk=4096)
    sa.metric_parameters(input_throughput=float(os.environ["TPS"]))
"""
    )
    ids = []
    for backend, tps in (("marlin", "100.5"), ("marlin", "999.25"), ("flashinfer_mxfp4", "100.5")):
        out = pytester.path / f"a-{backend}-{tps}"
        os.environ["B"], os.environ["TPS"] = backend, tps
        try:
            pytester.runpytest("-p", "no:cacheprovider", "--alluredir", str(out)).assert_outcomes(passed=1)
        finally:
            del os.environ["B"], os.environ["TPS"]
        (res,) = _results(out)
        ids.append(res["historyId"])
    assert ids[0] == ids[1], "a metric value changed the history id: metrics must be excluded parameters"
    assert ids[0] != ids[2], "the backend parameter must be part of the history id"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_allure_extras_describe_the_run(session: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    _, _, alluredir = session
    props = dict(line.split("=", 1) for line in (alluredir / "environment.properties").read_text().splitlines())
    assert props["run_id"] == "r1" and props["engine"] == "sglang" and props["parallel"] == "TP1/EP1/DP1/PP1"
    assert props["backends"] == "marlin,flashinfer_mxfp4"
    cats = json.loads((alluredir / "categories.json").read_text())
    assert [c["name"] for c in cats] == [
        "Environment",
        "Out of memory",
        "NCCL error",
        "Server crash",
        "Timeout",
        "SLO miss",
        "Performance regression (baseline gate)",
        "Comparison: worse",
        "Comparison: equivalent, not better",
        "Expectation not met",
        "Client-bound measurement",
        "Numerics mismatch",
        "Output mismatch",
        "Inconclusive comparison",
    ]
    exe = json.loads((alluredir / "executor.json").read_text())
    assert exe["buildName"] == "r1" and exe["type"] == "pytest-sskj"
    failed = next(r for r in _results(alluredir) if r["name"] == "test_slo_miss")
    import re

    slo = next(c for c in cats if c["name"] == "SLO miss")
    assert re.fullmatch(slo["messageRegex"], failed["statusDetails"]["message"]), failed["statusDetails"]["message"]


def test_helpers_are_no_ops_without_alluredir(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_x="""
from pytest_sskj.report import allure as sa
def test_it(tmp_path):
    assert not sa.active()
    sa.labels(epic="e", severity="critical"); sa.parameters(a=1); sa.metric_parameters(b=None)
    with sa.step("s"):
        sa.attach_json("j", {"a": 1}); sa.attach_text("t", "x"); sa.attach_csv("c", [[1, 2]])
        p = tmp_path / "f.txt"; p.write_text("x"); sa.attach_file(p)
"""
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not list(pytester.path.rglob("*-result.json"))


def test_bad_severity_is_refused_with_the_accepted_values() -> None:
    from pytest_sskj.report import allure as sa

    with pytest.raises(ValueError, match="blocker, critical, normal, minor, trivial"):
        sa.labels(severity="urgent")
