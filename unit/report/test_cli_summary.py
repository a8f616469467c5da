"""``python -m pytest_sskj report summary`` rebuilds summary.md and plots of a crashed run from its files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main


def test_summary_of_a_crashed_run_is_rebuilt_from_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "reports" / "r9"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(
        json.dumps({"run_id": "r9", "status": "running", "settings": {"backends": ["marlin", "flashinfer_mxfp4"]}})
    )
    rows = [
        {
            "backend": b,
            "chunk": 8192,
            "concurrency": 16,
            "repeat": r,
            "status": "passed",
            "input_throughput": t,
            "median_ttft_ms": m,
            "p95_ttft_ms": m,
            "test_id": f"{b}{r}",
        }
        for b, r, t, m in (("marlin", 0, 2934.90, 87090.0), ("flashinfer_mxfp4", 0, 3260.14, 78390.0))
    ]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"backend": "mar')
    assert main(["report", "summary", "--run", "r9", "--reports-dir", str(tmp_path / "reports")]) == 0
    out = capsys.readouterr().out
    assert "2 row(s), 0 verdict(s), 2 plot(s)" in out and "recovered: results.jsonl line 3 is not valid JSON" in out
    md = (run / "summary.md").read_text()
    # 3260.14 / 2934.90 - 1 = +11.08 %; 78390 / 87090 - 1 = -9.99 % (the users' 8K C=16 row)
    # TTFT P50 / P95, then TPOT P50 / P95 and E2E P95: n/a, the rows carry none
    row = (
        "| 8K | 16 | flashinfer_mxfp4 | 3260.14 | 78.39 s | 78.39 s | n/a | n/a | n/a "
        "| +11.08% TPS / \u22129.99% TTFT | 1/1 |"
    )
    assert row in md, md
    assert "- status: running" in md
    assert main(["report", "summary", "--run", "nope", "--reports-dir", str(tmp_path / "reports")]) == 2


def test_module_entry_point_prints_usage_for_no_command() -> None:
    res = subprocess.run([sys.executable, "-m", "pytest_sskj"], capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "usage: python -m pytest_sskj" in res.stderr
