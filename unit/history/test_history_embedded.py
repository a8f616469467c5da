"""Done-when, on the real embedded engine: two ``pytest acceptance/`` runs land in the SQLite database,
``history`` lists both runs' points and ``compare`` prints their deltas; ``--sskj-baseline <first run>``
judges every configuration of the second run (A/A: no regression) and a planted slowdown (32-token
micro-batches, ``--ubatch 32`` through server args: 5-10x slower prefill in llama.cpp's code, not the
machine's load) fails with ``[regression]``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_sskj.__main__ import main

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


pytestmark = pytest.mark.slow  # two full embedded acceptance runs, the database and the gate


def _acceptance(pytester: pytest.Pytester, run_id: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        str(ACCEPTANCE),
        "--reports-dir",
        str(pytester.path / "reports"),
        "-p",
        "no:cacheprovider",
        "--run-id",
        run_id,
        "--backend",
        "parallel",
        "--isl",
        "256",
        "--osl",
        "8",
        "--requests",
        "16",
        "--repeats",
        "3",
        "--chunk",
        "256",
        "--concurrency",
        "8",
        "--sskj-search",
        "none",
        "--sskj-allow-client-bound",  # a loaded shared machine: the gate itself calls those repeats inconclusive
        # the baseline's own repeat spread measures noise within one run; between two runs on this shared 2-core
        # box the same server drifted by up to 13 % input TPS and 37 % TTFT P95 (CI, A/A), and 64 % TTFT P95 with the
        # twin phase's two workers beside the slow phase (all 3 repeats of the second run above the first's), so
        # the margin covers that drift; the planted slowdown (~88 % lower input TPS) still clears it by far
        "--sskj-regression-margin",
        "80",
        *args,
        timeout=400,
    )


def _baseline_verdicts(run_dir: Path) -> list[dict[str, object]]:
    data = json.loads((run_dir / "verdicts.json").read_text())
    return [v for v in data["verdicts"] if v.get("kind") == "baseline"]


def test_two_runs_history_compare_and_the_baseline_gate(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = pytester.path / "reports"
    first = _acceptance(pytester, "first")
    assert first.ret == 0, first.stdout.str()[-3000:]
    assert "sskj: results database sqlite:///" in first.stdout.str()
    second = _acceptance(pytester, "second", "--sskj-baseline", "first")
    text = second.stdout.str()
    gated = _baseline_verdicts(reports / "second")
    assert [v["id"] for v in gated] == ["parallel-chunk256-c8"], f"expected every config judged, saw {gated}"
    assert gated[0]["baseline_run"] == "first" and gated[0]["outcome"] != "regression", gated[0]["message"]
    assert "test_baseline" in text and "[regression]" not in text, text[-3000:]

    with sqlite3.connect(reports / "results.sqlite") as conn:
        n = dict(conn.execute("select run_id, count(*) from points group by run_id").fetchall())
    assert n == {"first": 3, "second": 3}, f"expected 3 points of each run in the database, saw {n}"
    capsys.readouterr()
    assert main(["history", "--reports-dir", str(reports), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted({r["run_id"] for r in rows}) == ["first", "second"]
    assert main(["compare", "first", "second", "--reports-dir", str(reports)]) == 0
    out = capsys.readouterr().out
    assert "compare run first -> run second" in out and "TTFT P95" in out, out

    slow = _acceptance(pytester, "slow", "--sskj-baseline", "first", "--sskj-server-arg=--ubatch=32")
    verdict = _baseline_verdicts(reports / "slow")[0]
    assert verdict["outcome"] == "regression", f"expected the planted slowdown to regress: {verdict['message']}"
    outcomes = slow.parseoutcomes()
    assert outcomes.get("failed") == 1, f"expected only test_baseline to fail, saw {outcomes}"
    slow.stdout.fnmatch_lines(["*FAILED*test_baseline.py::test_baseline[[]parallel-chunk256-c8[]]*"])
    assert "[regression] parallel-chunk256-c8: " in slow.stdout.str() + json.dumps(verdict)
