"""Release scopes (issue 45): a user's release of their own green job as typed (scope ``job``: ``pytest unit/`` as
typed plus the acceptance job), CI's full-suite release, what a refusal says would qualify, one build per mark,
and ``release show`` for a person.  Real sessions through pytester; the scopes come from the repository's
``release.toml`` unless a test writes its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.report.release import ReleaseConfig, ReleaseRefused, latest_runs, load_config, mark
from unit.report.test_release import SLOW_CONFTEST

REPO_CFG = Path(__file__).resolve().parents[2] / "release.toml"
GPU_ABSENT = "needs 1 x GPU, found 0 GPUs (NVML: NVML Shared Library Not Found)"
FILES = {
    "unit/conftest.py": SLOW_CONFTEST,
    "unit/test_a.py": (
        "import pytest\ndef test_fast():\n    pass\ndef test_other():\n    pass\n"
        "@pytest.mark.slow\ndef test_slow():\n    pass\n"
        f"def test_kernel():\n    pytest.skip({GPU_ABSENT!r})\n"
    ),
    "acceptance/test_job.py": "def test_serving():\n    pass\ndef test_backend_comparison():\n    pass\n",
}
OPTS = ("--reports-dir", "rep", "-p", "no:cacheprovider")


def _project(pytester: pytest.Pytester, **extra: str) -> tuple[Path, ReleaseConfig]:
    pytester.makepyfile(**{**FILES, **extra})
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    return pytester.path / "rep", load_config(REPO_CFG)


def _refused(rep: Path, cfg: ReleaseConfig, runs: list[str] | None, scope: str) -> list[str]:
    with pytest.raises(ReleaseRefused) as exc:
        mark(runs, "refused", reports_dir=rep, config=cfg, scope=scope)
    return exc.value.reasons


def test_a_users_green_job_and_unit_run_as_typed_are_a_job_release_with_both_run_ids_and_the_build(
    pytester: pytest.Pytester,
) -> None:
    rep, cfg = _project(pytester)
    pytester.runpytest("unit/", "--run-id", "unit", *OPTS).assert_outcomes(passed=2, skipped=1)
    pytester.runpytest("acceptance/", "--run-id", "kimi3-ab", *OPTS).assert_outcomes(passed=2)
    assert latest_runs(rep, cfg, scope="job") == ["unit", "kimi3-ab"]
    data: dict[str, Any] = json.loads(mark(None, "kimi3-v1", reports_dir=rep, config=cfg, scope="job").read_text())
    assert data["scope"] == "job" and data["run_id"] == ["unit", "kimi3-ab"], (data["scope"], data["run_id"])
    assert data["runs_by_suite"] == {"unit": ["unit"], "acceptance": ["kimi3-ab"]}, data["runs_by_suite"]
    assert data["commands"]["unit"].startswith("pytest unit/ --run-id unit"), data["commands"]
    assert data["commands"]["kimi3-ab"].startswith("pytest acceptance/ --run-id kimi3-ab"), data["commands"]
    assert data["build"] is not None and data["build"]["version"], f"the build identity is recorded: {data['build']}"
    assert data["coverage"] == {"unit": "as-typed", "acceptance": "full"}, data["coverage"]
    assert data["not_required"] == {"unit": 1}, "the slow check its conftest deselects is counted, not required"
    assert data["accepted_skips"] == [{"nodeid": "unit/test_a.py::test_kernel", "reason": f"Skipped: {GPU_ABSENT}"}]
    # the same runs are not a full (gpu / cpu) release: the slow check ran in neither
    reasons = _refused(rep, cfg, ["unit", "kimi3-ab"], "cpu")
    assert reasons[0] == "required suite 'unit' did not run in full: 1 test(s) deselected", reasons
    assert reasons[-1].startswith(
        "required suite 'unit' did not run as scope 'cpu' needs: run `pytest unit/` + `pytest unit/ --run-slow -m "
        "slow` + `pytest unit/twin/ --run-slow` (its whole collection, in one run or several"
    ), reasons


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("unit/", "-k", "fast"), "narrowed with -k 'fast'"),
        (("unit/", "-m", "not slow"), "narrowed with -m 'not slow'"),
        (("unit/", "--deselect", "unit/test_a.py::test_other"), "narrowed with --deselect unit/test_a.py::test_other"),
        (("unit/test_a.py",), "narrowed with a path below it or an --ignore (unit/test_a.py)"),
    ],
    ids=["k", "m", "deselect", "path"],
)
def test_a_narrowed_unit_run_is_refused_for_the_job_scope_with_the_command_that_qualifies(
    pytester: pytest.Pytester, args: tuple[str, ...], why: str
) -> None:
    rep, cfg = _project(pytester)
    pytester.runpytest(*args, "--run-id", "unit", *OPTS)
    pytester.runpytest("acceptance/", "--run-id", "job", *OPTS).assert_outcomes(passed=2)
    reasons = _refused(rep, cfg, ["unit", "job"], "job")
    assert reasons == [
        f"required suite 'unit' did not run as typed (run unit): {why}",
        "required suite 'unit' did not run as scope 'job' needs: run `SSKJ_RUN_ID=unit pytest unit/` (as typed: "
        "no -k, -m, --deselect, --lf or path below unit/)",
    ], reasons


def test_a_filtered_acceptance_job_is_refused_and_a_skip_in_the_job_is_not_accepted(
    pytester: pytest.Pytester,
) -> None:
    job = (
        "import pytest\ndef test_serving():\n    pass\n"
        f"def test_backend_comparison():\n    pytest.skip({GPU_ABSENT!r})\n"
    )
    rep, cfg = _project(pytester, **{"acceptance/test_job.py": job})
    pytester.runpytest("unit/", "--run-id", "unit", *OPTS).assert_outcomes(passed=2, skipped=1)
    pytester.runpytest("acceptance/", "-k", "serving", "--run-id", "k", *OPTS).assert_outcomes(passed=1)
    pytester.runpytest("acceptance/", "--run-id", "skip", *OPTS).assert_outcomes(passed=1, skipped=1)
    reasons = _refused(rep, cfg, ["unit", "k"], "job")
    assert "required suite 'acceptance' did not run in full: selected with -k 'serving'" in reasons, reasons
    assert reasons[-1].startswith("required suite 'acceptance' did not run as scope 'job' needs: run `pytest "), reasons
    reasons = _refused(rep, cfg, ["unit", "skip"], "job")
    assert reasons == [
        f"required test acceptance/test_job.py::test_backend_comparison skipped (in call): Skipped: {GPU_ABSENT} "
        "(not accepted by scope 'job')"
    ], "a skip in the job itself is a test that did not run; the unit suite's hardware-absent skip is accepted"


def test_the_job_scope_judges_the_newest_run_as_typed_not_a_newer_narrowed_one(pytester: pytest.Pytester) -> None:
    rep, cfg = _project(pytester)
    pytester.runpytest("unit/", "--run-id", "typed", *OPTS).assert_outcomes(passed=2, skipped=1)
    pytester.runpytest("acceptance/", "--run-id", "job", *OPTS).assert_outcomes(passed=2)
    pytester.runpytest("unit/", "--run-slow", "-m", "slow", "--run-id", "slow", *OPTS).assert_outcomes(passed=1)
    assert latest_runs(rep, cfg, scope="job") == ["typed", "job"]
    assert latest_runs(rep, cfg, scope="cpu") == ["slow", "typed", "job"], "a full scope covers the suite over runs"
    assert mark(None, "cpu", reports_dir=rep, config=cfg, scope="cpu").is_file()


def test_runs_of_different_builds_are_refused_naming_each(pytester: pytest.Pytester) -> None:
    rep, cfg = _project(pytester)
    pytester.runpytest("unit/", "--run-id", "unit", *OPTS).assert_outcomes(passed=2, skipped=1)
    pytester.runpytest("acceptance/", "--run-id", "job", *OPTS).assert_outcomes(passed=2)
    path = rep / "job" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["pytest_sskj"] = {"version": "0.0.9", "git_commit": "0123456789abcdef"}
    path.write_text(json.dumps(manifest))
    reasons = _refused(rep, cfg, ["unit", "job"], "job")
    assert len(reasons) == 1 and reasons[0].startswith("the runs were made by different builds: unit (pytest-sskj "), (
        reasons
    )
    assert "job (pytest-sskj 0.0.9 @ 0123456789ab)" in reasons[0], reasons


def test_release_show_prints_scope_build_runs_and_commands_and_json_on_request(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rep, _ = _project(pytester)
    pytester.runpytest("unit/", "--run-id", "unit", *OPTS).assert_outcomes(passed=2, skipped=1)
    pytester.runpytest("acceptance/", "--run-id", "job", *OPTS).assert_outcomes(passed=2)
    capsys.readouterr()
    monkeypatch.chdir(pytester.path)
    base = ["--reports-dir", str(rep)]
    assert main(["release", "mark", "--tag", "v1", "--scope", "job", "--config", str(REPO_CFG), *base]) == 0
    marked = capsys.readouterr().out
    assert "judging the latest runs: unit+job" in marked and "marked run unit+job as release v1" in marked, marked
    assert main(["release", "show", "v1", *base]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0].startswith("release v1: release, scope job (a user's release of their own green job"), shown
    assert shown[1].startswith("  marked ") and ", build pytest-sskj " in shown[1], shown
    assert shown[2].startswith("  unit: as typed, run(s) unit (pytest unit/ --run-id unit"), shown
    assert shown[2].endswith("; 1 test(s) its defaults deselect not required"), shown
    assert shown[3].startswith("  acceptance: its whole collection, run(s) job (pytest acceptance/ --run-id job"), shown
    assert shown[4] == "  tests: passed 4, skipped 1 (1 skip(s) accepted by the scope)", shown
    assert main(["release", "show", "v1", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["scope"] == "job"


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        ('coverage = { unit = "most" }', "release.scopes.x.coverage.unit is 'most'; accepted: full, as-typed"),
        ("coverage = 3", "release.scopes.x.coverage must be a table"),
        ("qualify = { unit = [] }", "release.scopes.x.qualify.unit must be a command or a non-empty list"),
        ("accept_skips_in = 'unit'", "release.scopes.x.accept_skips_in must be a list of suite names"),
        ("reports = 1", "release.scopes.x has unknown key(s) reports; accepted: description, accept_skip_reasons"),
    ],
    ids=["coverage-value", "coverage-type", "qualify-empty", "skips-in", "unknown-key"],
)
def test_a_bad_scope_table_is_refused_naming_the_key(tmp_path: Path, scope: str, message: str) -> None:
    path = tmp_path / "release.toml"
    path.write_text(f'[release]\nrequired_suites = ["unit"]\n[release.scopes.x]\n{scope}\n')
    with pytest.raises(ValueError) as exc:
        load_config(path)
    assert message in str(exc.value), str(exc.value)
