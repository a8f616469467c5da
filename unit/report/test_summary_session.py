"""``summary.md`` shows the session's test counts, why tests were deselected and the terminal's overhead line:
the same lines the terminal printed (one computation, :func:`pytest_sskj.acceptance.plugin.session_overhead`
and ``session_deselections``, stored in the manifest's ``session``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.report.summary import render_summary

ROOT = Path(__file__).resolve().parents[2]


def test_summary_renders_counts_deselections_and_overhead_from_the_manifest() -> None:
    manifest = {
        "run_id": "r1",
        "counts": {"passed": 3, "failed": 1, "skipped": 2, "error": 0, "xfailed": 1, "xpassed": 0},
        "session": {
            "deselected": 5,
            "deselections": ["deselected 5 by the command line (-k, -m, --deselect) or the unit suite's slow marker"],
            "overhead": "overhead: 2 server start(s) for 2 server run(s); session wall 9.0 s vs 6.0 s (1.50x)",
        },
    }
    text = render_summary([], [], manifest=manifest)
    assert "## Session" in text, text
    assert "- tests: 3 passed, 1 failed, 2 skipped, 1 xfailed, 5 deselected" in text, text
    assert "- deselected 5 by the command line" in text and "- overhead: 2 server start(s)" in text, text
    assert "## Session" not in render_summary([], [], manifest={"run_id": "old"}), "a manifest without counts"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_run_summary_shows_the_terminal_counts_deselections_and_overhead_line(tmp_path: Path) -> None:
    res = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", str(ROOT / "acceptance")),
            *("--reports-dir", "rep", "--run-id", "s1", "--requests", "4", "--repeats", "1", "--concurrency", "1"),
            # one small point (one chunk: the chunk curve is deselected as not applicable, one more line to find)
            *("--isl", "64", "--osl", "2", "--chunk", "512", "--sskj-search", "none"),
            *("--sskj-allow-client-bound", "-k", "serving and parallel"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = res.stdout + res.stderr
    summary = (tmp_path / "rep" / "s1" / "summary.md").read_text()
    overhead = [line for line in out.splitlines() if line.startswith("overhead: ")]
    assert len(overhead) == 1 and f"- {overhead[0]}" in summary, (overhead, summary[:3000])
    for line in (x for x in out.splitlines() if x.startswith("deselected ")):
        assert f"- {line}" in summary, (line, summary[:3000])
    final = re.search(r"(\d+) passed(?:, (\d+) failed)?, (\d+) deselected", out)
    assert final, out[-2000:]
    passed, failed, deselected = (int(g or 0) for g in final.groups())
    expected = f"- tests: {passed} passed, {failed} failed, 0 skipped, {deselected} deselected"
    assert expected in summary, (expected, summary[:3000])
