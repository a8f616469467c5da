"""Allure 3 history across runs: two sessions rendered with one history file; the second report's test page
lists the earlier run (checked in headless Chromium) and the history holds each run's headline medians."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.report.html import (
    ALLURE_INSTALL,
    CHROMIUM_INSTALL,
    check_html,
    find_allure,
    find_chromium,
    render_html,
)
from unit.report.test_html_report import INNER


def _session(cwd: Path, run_id: str) -> Path:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--alluredir", f"ar-{run_id}",
         "--reports-dir", "rep", "--run-id", run_id, "--engine", "sglang", "acceptance"],
        cwd=cwd, capture_output=True, text=True, timeout=300, check=False, env={**os.environ, "SSKJ_REPORTS_DIR": ""},
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    return cwd / f"ar-{run_id}"


@pytest.mark.slow  # Allure 3 through node and a real headless Chromium, end to end
@pytest.mark.skipif(
    find_allure() is None, reason=f"Allure 3 is not installed (run `{ALLURE_INSTALL}` in the repo root)"
)
@pytest.mark.skipif(find_chromium() is None, reason=f"Chromium is not installed (run `{CHROMIUM_INSTALL}`)")
def test_second_report_shows_the_first_run_in_each_tests_history(tmp_path: Path) -> None:
    (tmp_path / "acceptance").mkdir()
    (tmp_path / "acceptance" / "test_inner.py").write_text(INNER)
    history = tmp_path / "allure-history.jsonl"
    first = _session(tmp_path, "h1")
    perf = json.loads((first / "sskj-h1-perf.json").read_text())
    keys = {p["key"] for p in perf}
    assert "marlin chunk 8K C=8 Input TPS" in keys and all(p["value"] > 0 for p in perf), keys
    render_html(first, tmp_path / "h1.html", history=history)
    # the second run measures other values: the metric parameters differ, the history ids must not
    (tmp_path / "acceptance" / "test_inner.py").write_text(INNER.replace("1.1 if backend", "1.3 if backend"))
    second = _session(tmp_path, "h2")
    out = render_html(second, tmp_path / "h2.html", history=history)
    res = check_html(out, second, history=True)
    assert res.history_items >= 1, f"expected {res.history_test!r} to list the first run, saw {res.history_items}"
    entries = [json.loads(line) for line in history.read_text().splitlines()]
    assert len(entries) == 2, f"expected one history entry per rendered report, saw {len(entries)}"
    ids = [set(e["testResults"]) for e in entries]
    assert ids[0] == ids[1], "metric values must not change a test's history id"
    tps = [e["metrics"]["flashinfer_mxfp4 chunk 8K C=8 Input TPS"] for e in entries]
    assert tps == [pytest.approx(2935.02 * 1.1), pytest.approx(2935.02 * 1.3)], f"expected the trend, saw {tps}"


def test_the_same_results_rendered_again_add_no_history_entry(tmp_path: Path) -> None:
    """Issue 27: every render of the same results appended a duplicate entry.  Allure renders against a copy;
    the new entry is appended only when no entry of the same test results (ids, statuses) is there yet, and a
    pending entry that is never committed (its --check failed) adds nothing."""
    from pytest_sskj.report.html import commit_history, pending_history

    history = tmp_path / "allure-history.jsonl"
    out = tmp_path / "report.html"

    def entry(uuid: str, status: str) -> str:
        return json.dumps({"uuid": uuid, "timestamp": 1, "testResults": {"h1": {"id": "t1", "status": status}}})

    pending_history(out).write_text(entry("a", "passed") + "\n")
    assert commit_history(history, out) == 1
    pending_history(out).write_text(entry("b", "passed") + "\n")  # the same results, rendered again
    assert commit_history(history, out) == 0
    pending_history(out).write_text(entry("c", "failed") + "\n")  # new results
    assert commit_history(history, out) == 1
    assert [json.loads(x)["uuid"] for x in history.read_text().splitlines()] == ["a", "c"]
    assert not pending_history(out).exists() and commit_history(history, out) == 0
