"""OutcomeRecorder folds setup/call/teardown reports into one outcome per test, like pytest's summary."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sskj.report.outcomes import OutcomeRecorder, load_outcomes, suite_of


def _rep(nodeid: str, when: str, outcome: str, **kw: Any) -> SimpleNamespace:
    longrepr = kw.pop("longrepr", None)
    return SimpleNamespace(
        nodeid=nodeid,
        when=when,
        passed=outcome == "passed",
        failed=outcome == "failed",
        skipped=outcome == "skipped",
        longrepr=longrepr,
        duration=0.5,
        keywords={},
        sskj_markers=["gpu"],
        **kw,
    )


@pytest.mark.parametrize(
    ("reports", "expected"),
    [
        ([("setup", "passed"), ("call", "passed"), ("teardown", "passed")], ("passed", "call")),
        ([("setup", "passed"), ("call", "failed"), ("teardown", "passed")], ("failed", "call")),
        ([("setup", "failed"), ("teardown", "passed")], ("error", "setup")),
        ([("setup", "passed"), ("call", "passed"), ("teardown", "failed")], ("error", "teardown")),
        ([("setup", "skipped"), ("teardown", "passed")], ("skipped", "setup")),
        ([("setup", "passed")], ("running", "setup")),
    ],
)
def test_phases_fold_into_one_outcome(
    tmp_path: Path, reports: list[tuple[str, str]], expected: tuple[str, str]
) -> None:
    rec = OutcomeRecorder(tmp_path, "r1", min_interval_s=3600)
    for when, outcome in reports:
        rec.record(_rep("unit/x/test_a.py::test_1", when, outcome))
    t = rec.tests["unit/x/test_a.py::test_1"]
    assert (t["outcome"], t["when"]) == expected
    assert t["suite"] == "unit" and t["markers"] == ["gpu"]
    assert t["duration_s"] == 0.5 * len(reports)


def test_xfail_and_xpass_are_told_apart(tmp_path: Path) -> None:
    rec = OutcomeRecorder(tmp_path, "r1", min_interval_s=3600)
    rec.record(_rep("acceptance/t.py::x", "call", "skipped", wasxfail="known bug"))
    rec.record(_rep("acceptance/t.py::y", "call", "passed", wasxfail=""))
    assert rec.tests["acceptance/t.py::x"]["outcome"] == "xfailed"
    assert rec.tests["acceptance/t.py::x"]["message"] == "xfail: known bug"
    assert rec.tests["acceptance/t.py::y"]["outcome"] == "xpassed"
    path = rec.write(complete=True, exitstatus=0)
    data = load_outcomes(tmp_path)
    assert path.name == "outcomes.json" and data["complete"] is True
    assert data["counts"] == {"xfailed": 1, "xpassed": 1}


def test_skip_reason_is_kept_and_secrets_in_it_are_not(tmp_path: Path) -> None:
    rec = OutcomeRecorder(tmp_path, "r1", secrets=("s3cr3t-value",), min_interval_s=0)
    rec.record(_rep("unit/t.py::z", "setup", "skipped", longrepr=("t.py", 3, "Skipped: key s3cr3t-value absent")))
    assert rec.tests["unit/t.py::z"]["message"] == "Skipped: key ***REDACTED*** absent"
    on_disk = json.loads((tmp_path / "outcomes.json").read_text())
    assert on_disk["complete"] is False, "a running session's file must not claim to be complete"


def test_suite_is_the_top_level_directory() -> None:
    assert suite_of("unit/report/test_x.py::t[a/b]") == "unit"
    assert suite_of("acceptance/test_serving.py::test_serving[x]") == "acceptance"
    assert suite_of("test_root.py::t") == "(root)"
