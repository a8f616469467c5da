"""Release marking: green runs are marked; every refusal case says exactly why; list/show read marks back.

Since issue 12 the run's recorded selection is judged too (a suite that did not run in full refuses) and
skips are judged by the release scope of release.toml: the helpers record a full selection, and the real
session test no longer marks a run that selected one file of a required suite (deliberate change).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.report.release import (
    ReleaseConfig,
    ReleaseRefused,
    latest_runs,
    list_releases,
    load_config,
    mark,
    rank_reasons,
    show_release,
)

# issue 45: a refusal for a suite that did not run as its scope needs ends with the command(s) that would qualify
# (a config without scopes: the default scope 'gpu', ``pytest <suite>/``)
QUALIFY = (
    "required suite '{suite}' did not run as scope 'gpu' needs: run `pytest {suite}/` "
    "(its whole collection, in one run or several that leave none of it out)"
)
CFG = ReleaseConfig(required_suites=("unit", "acceptance"), min_tests={"acceptance": 2})


def _test(nodeid: str, outcome: str = "passed", when: str = "call", message: str | None = None) -> dict[str, Any]:
    return {
        "nodeid": nodeid,
        "suite": nodeid.split("/", 1)[0],
        "outcome": outcome,
        "when": when,
        "markers": [],
        "duration_s": 0.1,
        "message": message,
    }


SLOW_CONFTEST = (
    "import pytest\n"
    "def pytest_addoption(parser):\n    parser.addoption('--run-slow', action='store_true')\n"
    "def pytest_collection_modifyitems(config, items):\n"
    "    if config.getoption('--run-slow'):\n        return\n"
    "    slow = [i for i in items if i.get_closest_marker('slow')]\n"
    "    config.hook.pytest_deselected(items=slow)\n"
    "    items[:] = [i for i in items if i not in slow]\n"
)
"""A suite's conftest that deselects its slow tests unless ``--run-slow`` is given (as unit/conftest.py does)."""

FULL: dict[str, Any] = {"args": ["unit", "acceptance"], "keyword": "", "markexpr": "", "deselected": {}}

GREEN = [
    _test("unit/test_a.py::test_1"),
    _test("acceptance/test_s.py::test_serving[marlin]"),
    _test("acceptance/test_s.py::test_backend_comparison"),
    _test("docs/test_x.py::test_optional", "failed"),
]


def _run(
    reports: Path,
    tests: list[dict[str, Any]] | None = GREEN,
    *,
    complete: bool = True,
    exitstatus: int = 1,
    status: str = "finished",
    run_id: str = "r1",
    selection: dict[str, Any] | None = None,
) -> Path:
    d = reports / run_id
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": run_id,
                "status": status,
                "exitstatus": exitstatus,
                "settings": {"backends": ["marlin", "flashinfer_mxfp4"]},
            }
        )
    )
    if tests is not None:
        (d / "outcomes.json").write_text(
            json.dumps(
                {
                    "run_id": run_id,
                    "complete": complete,
                    "exitstatus": exitstatus,
                    "counts": {"passed": len(tests)},
                    "selection": FULL if selection is None else selection,
                    "tests": tests,
                }
            )
        )
    rows = [
        {
            "backend": b,
            "chunk": 4096,
            "concurrency": 8,
            "repeat": 0,
            "status": "passed",
            "input_throughput": tps,
            "median_ttft_ms": ttft,
            "p95_ttft_ms": ttft,
            "test_id": b,
        }
        for b, tps, ttft in (("marlin", 2694.53, 48860.0), ("flashinfer_mxfp4", 2957.23, 44480.0))
    ]
    (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "verdicts.jsonl").write_text(
        json.dumps({"kind": "comparison", "passed": True, "message": "+9.75%"})
        + "\n"
        + json.dumps({"kind": "search", "best": 32, "passed": True})
        + "\n"
    )
    return d


def test_green_run_is_marked_with_suites_counts_manifest_and_figures(tmp_path: Path) -> None:
    _run(tmp_path)
    out = mark("r1", "v1.0", reports_dir=tmp_path, config=CFG)
    assert out == tmp_path / "releases" / "v1.0.json"
    rec = json.loads(out.read_text())
    assert rec["verdict"] == "release" and rec["run_id"] == "r1" and rec["required_suites"] == ["unit", "acceptance"]
    assert rec["suites"] == {"unit": {"passed": 1}, "acceptance": {"passed": 2}, "docs": {"failed": 1}}
    assert rec["manifest"]["run_id"] == "r1"
    fi = next(p for p in rec["figures"]["points"] if p["backend"] == "flashinfer_mxfp4")
    assert fi["vs_baseline"] == "+9.75% TPS / \u22128.96% TTFT"
    assert [v["kind"] for v in rec["figures"]["comparisons"]] == ["comparison"]
    assert [v["kind"] for v in rec["figures"]["slo"]] == ["search"]


@pytest.mark.parametrize(
    ("outcome", "when", "expected"),
    [
        ("failed", "call", "required test acceptance/test_s.py::test_backend_comparison failed (in call): boom"),
        ("error", "setup", "required test acceptance/test_s.py::test_backend_comparison error (in setup): boom"),
        ("skipped", "setup", "required test acceptance/test_s.py::test_backend_comparison skipped (in setup): boom"),
        ("xfailed", "call", "required test acceptance/test_s.py::test_backend_comparison xfailed (in call): boom"),
        ("xpassed", "call", "required test acceptance/test_s.py::test_backend_comparison xpassed (in call): boom"),
        ("running", "setup", "required test acceptance/test_s.py::test_backend_comparison running (in setup): boom"),
    ],
)
def test_a_required_test_that_did_not_pass_refuses(tmp_path: Path, outcome: str, when: str, expected: str) -> None:
    tests = [*GREEN[:2], _test("acceptance/test_s.py::test_backend_comparison", outcome, when, "boom")]
    _run(tmp_path, tests)
    with pytest.raises(ReleaseRefused) as exc:
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    assert exc.value.reasons == [expected]
    assert not (tmp_path / "releases").exists(), "a refused run must not leave a release file"


def test_missing_required_suite_and_too_few_tests_refuse(tmp_path: Path) -> None:
    _run(tmp_path, [_test("acceptance/test_s.py::test_serving")])
    with pytest.raises(ReleaseRefused) as exc:
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    assert exc.value.reasons == [
        "required suite 'unit' has no test results in this run; run it (e.g. pytest unit/) in the same session, "
        "or name its run with another --run",
        "required suite 'acceptance' ran 1 test(s); release.toml asks for at least 2",
    ]


def test_no_outcomes_file_refuses(tmp_path: Path) -> None:
    _run(tmp_path, None)
    with pytest.raises(ReleaseRefused) as exc:
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    assert len(exc.value.reasons) == 1 and "outcomes.json does not exist" in exc.value.reasons[0]


def test_corrupt_outcomes_file_refuses(tmp_path: Path) -> None:
    (_run(tmp_path) / "outcomes.json").write_text('{"tests": [')
    with pytest.raises(ReleaseRefused, match=r"outcomes\.json is not valid JSON"):
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)


def test_crashed_or_interrupted_run_refuses(tmp_path: Path) -> None:
    _run(tmp_path, complete=False, status="running", exitstatus=2)
    with pytest.raises(ReleaseRefused) as exc:
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    assert exc.value.reasons == [
        "the run did not finish: outcomes.json is not marked complete (crashed or interrupted run)",
        "manifest.json status is 'running', not 'finished'",
        "pytest exit status 2 (interrupted, internal or usage error): the run is not a complete verdict",
    ]


def test_unknown_run_bad_tag_and_existing_tag_refuse(tmp_path: Path) -> None:
    with pytest.raises(ReleaseRefused, match=r"run directory .*nope does not exist"):
        mark("nope", "v1", reports_dir=tmp_path, config=CFG)
    _run(tmp_path)
    with pytest.raises(ReleaseRefused, match=r"release tag .* is not accepted"):
        mark("r1", "../evil", reports_dir=tmp_path, config=CFG)
    mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    with pytest.raises(ReleaseRefused, match="release 'v1' already exists"):
        mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    assert mark("r1", "v1", reports_dir=tmp_path, config=CFG, force=True).is_file()


def test_two_sessions_are_judged_together(tmp_path: Path) -> None:
    """CI runs acceptance/ and unit/ as two sessions: together they make a release, alone they do not."""
    _run(tmp_path, [GREEN[1], GREEN[2]], run_id="acc", exitstatus=0)
    _run(tmp_path, [GREEN[0]], run_id="unit", exitstatus=0)
    with pytest.raises(ReleaseRefused, match="required suite 'unit' has no test results"):
        mark("acc", "v1", reports_dir=tmp_path, config=CFG)
    out = mark(["acc", "unit"], "v1", reports_dir=tmp_path, config=CFG)
    rec = json.loads(out.read_text())
    assert rec["run_id"] == ["acc", "unit"] and sorted(rec["manifests"]) == ["acc", "unit"]
    assert rec["suites"] == {"unit": {"passed": 1}, "acceptance": {"passed": 2}} and rec["counts"] == {"passed": 3}
    assert list_releases(tmp_path)[0]["run_id"] == "acc+unit"
    incomplete = {"complete": False, "selection": FULL, "tests": [GREEN[0]]}
    (tmp_path / "unit" / "outcomes.json").write_text(json.dumps(incomplete))
    with pytest.raises(ReleaseRefused) as exc:
        mark(["acc", "unit"], "v2", reports_dir=tmp_path, config=CFG)
    assert exc.value.reasons == [
        "run unit: the run did not finish: outcomes.json is not marked complete (crashed or interrupted run)"
    ]


def test_list_and_show_read_marks_back(tmp_path: Path) -> None:
    _run(tmp_path)
    mark("r1", "v1", reports_dir=tmp_path, config=CFG)
    mark("r1", "v2", reports_dir=tmp_path, config=CFG)
    assert [m["tag"] for m in list_releases(tmp_path)] == ["v1", "v2"]
    assert show_release("v2", tmp_path)["tag"] == "v2"
    with pytest.raises(FileNotFoundError, match=r"no release 'v3' .*\(known: v1, v2\)"):
        show_release("v3", tmp_path)


def test_config_comes_from_release_toml_and_bad_config_says_what_is_wrong(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[2] / "release.toml"
    assert load_config(repo).required_suites == ("unit", "acceptance")
    bad = tmp_path / "release.toml"
    bad.write_text("[release]\nrequired_suites = []\n")
    with pytest.raises(ValueError, match="required_suites must be a non-empty list"):
        load_config(bad)
    bad.write_text("[other]\n")
    with pytest.raises(ValueError, match="has no \\[release\\] table"):
        load_config(bad)


def test_cli_mark_list_show_and_refusal_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "release.toml"
    cfg.write_text('[release]\nrequired_suites = ["unit", "acceptance"]\n')
    _run(tmp_path / "reports")
    base = ["--reports-dir", str(tmp_path / "reports")]
    assert main(["release", "mark", "--run", "r1", "--tag", "v1", "--config", str(cfg), *base]) == 0
    assert "marked run r1 as release v1" in capsys.readouterr().out
    assert main(["release", "list", *base]) == 0
    assert capsys.readouterr().out.startswith("v1\trun r1\t")
    assert main(["release", "show", "v1", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "release"
    assert main(["release", "show", "v9", *base]) == 2
    assert "no release 'v9'" in capsys.readouterr().err
    (tmp_path / "reports" / "r1" / "outcomes.json").unlink()
    assert main(["release", "mark", "--run", "r1", "--tag", "v2", "--config", str(cfg), *base]) == 1
    err = capsys.readouterr().err
    assert err.startswith("refusing to mark run r1 as release 'v2' (1 reason(s)):\n  1. ") and "outcomes.json" in err


def test_real_session_outcomes_drive_marking(pytester: pytest.Pytester) -> None:
    """Outcomes recorded by the plugin in a real session: green -> marked; a skipped required test -> refused."""
    pytester.makepyfile(
        **{
            "unit/test_a.py": "def test_a():\n    pass\n",
            "acceptance/test_b.py": "def test_b():\n    pass\n",
            "docs/test_d.py": "import pytest\ndef test_d():\n    pytest.skip('optional')\n",
        }
    )
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["unit", "acceptance"]\n')
    opts = ("--reports-dir", "rep", "-p", "no:cacheprovider")
    pytester.runpytest("unit", "acceptance", "docs", "--run-id", "green", *opts).assert_outcomes(passed=2, skipped=1)
    cfg = load_config(pytester.path / "release.toml")
    out = mark("green", "ok", reports_dir=pytester.path / "rep", config=cfg)
    mark_data = json.loads(out.read_text())
    assert mark_data["suites"] == {"unit": {"passed": 1}, "acceptance": {"passed": 1}, "docs": {"skipped": 1}}
    assert mark_data["selection"]["green"]["collected"] == {"unit": 1, "acceptance": 1, "docs": 1}
    xfail = "import pytest\n@pytest.mark.xfail(reason='known')\ndef test_c():\n    assert 0\n"
    pytester.makepyfile(**{"acceptance/test_c.py": xfail})
    pytester.runpytest("unit", "acceptance", "--run-id", "xf", *opts).assert_outcomes(passed=2, xfailed=1)
    with pytest.raises(ReleaseRefused) as exc:
        mark("xf", "bad", reports_dir=pytester.path / "rep", config=cfg)
    assert exc.value.reasons == ["required test acceptance/test_c.py::test_c xfailed (in call): xfail: known"]
    pytester.runpytest("unit", "acceptance/test_b.py", "--run-id", "part", *opts).assert_outcomes(passed=2)
    with pytest.raises(ReleaseRefused) as exc:
        mark("part", "part", reports_dir=pytester.path / "rep", config=cfg)
    assert exc.value.reasons == [
        "required suite 'acceptance' did not run in full: only 'acceptance/test_b.py' was selected",
        QUALIFY.format(suite="acceptance"),
    ], exc.value.reasons


def test_k_selection_is_refused_with_the_deselected_count(pytester: pytest.Pytester) -> None:
    """The issue's case: `pytest unit/ -k slo` and `pytest acceptance/ -k ...` were marked as a release."""
    pytester.makepyfile(
        **{
            "unit/test_a.py": "def test_slo():\n    pass\ndef test_other():\n    pass\n",
            "acceptance/test_b.py": "def test_slo():\n    pass\ndef test_serving():\n    pass\n",
        }
    )
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["unit", "acceptance"]\n')
    res = pytester.runpytest("unit", "acceptance", "-k", "slo", "--reports-dir", "rep", "--run-id", "k")
    res.assert_outcomes(passed=2)
    cfg = load_config(pytester.path / "release.toml")
    with pytest.raises(ReleaseRefused) as exc:
        mark("k", "v1", reports_dir=pytester.path / "rep", config=cfg)
    assert exc.value.reasons == [
        "required suite 'unit' did not run in full: selected with -k 'slo'",
        "required suite 'unit' did not run in full: 1 test(s) deselected",
        QUALIFY.format(suite="unit"),
        "required suite 'acceptance' did not run in full: selected with -k 'slo'",
        "required suite 'acceptance' did not run in full: 1 test(s) deselected",
        QUALIFY.format(suite="acceptance"),
    ], exc.value.reasons


def test_scope_policy_cpu_accepts_and_lists_hardware_absent_skips_gpu_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "release.toml")
    absent = "Skipped: needs 1 x sm120, found 0 GPUs (NVML: NVML Shared Library Not Found)"
    tests = [*GREEN, _test("unit/test_gpu.py::test_kernel", "skipped", "setup", absent)]
    _run(tmp_path, tests)
    with pytest.raises(ReleaseRefused) as exc:
        mark("r1", "gpu1", reports_dir=tmp_path, config=cfg)
    assert exc.value.reasons == [
        f"required test unit/test_gpu.py::test_kernel skipped (in setup): {absent} (not accepted by scope 'gpu')"
    ], "the gpu scope accepts no hardware-absent skip (only tests that do not apply to the run's configuration)"
    out = mark("r1", "cpu1", reports_dir=tmp_path, config=cfg, scope="cpu")
    data = json.loads(out.read_text())
    assert data["scope"] == "cpu", data["scope"]
    assert data["accepted_skips"] == [{"nodeid": "unit/test_gpu.py::test_kernel", "reason": absent}]
    other = [*GREEN, _test("unit/test_x.py::test_y", "skipped", "call", "Skipped: not today")]
    _run(tmp_path, other, run_id="r2")
    with pytest.raises(ReleaseRefused) as exc:
        mark("r2", "cpu2", reports_dir=tmp_path, config=cfg, scope="cpu")
    assert exc.value.reasons == [
        "required test unit/test_x.py::test_y skipped (in call): Skipped: not today (not accepted by scope 'cpu')"
    ]
    base = ["--reports-dir", str(tmp_path), "--config", str(cfg.path)]
    assert main(["release", "mark", "--run", "r2", "--tag", "cpu2", "--scope", "cpu", "--json", *base]) == 1
    refusal = json.loads(capsys.readouterr().out)
    assert refusal["verdict"] == "refused" and "not accepted by scope 'cpu'" in refusal["reasons"][0], refusal
    assert main(["release", "mark", "--run", "r1", "--tag", "cpu3", "--scope", "cpu", "--json", *base]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "release"


def test_ignored_path_of_a_required_suite_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        **{"unit/test_a.py": "def test_a():\n    pass\n", "unit/test_b.py": "def test_b():\n    pass\n"}
    )
    pytester.makepyfile(**{"acceptance/test_c.py": "def test_c():\n    pass\n"})
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["unit", "acceptance"]\n')
    res = pytester.runpytest(
        "unit", "acceptance", "--ignore", "unit/test_b.py", "--reports-dir", "rep", "--run-id", "i"
    )
    res.assert_outcomes(passed=2)
    with pytest.raises(ReleaseRefused) as exc:
        mark("i", "v1", reports_dir=pytester.path / "rep", config=load_config(pytester.path / "release.toml"))
    assert exc.value.reasons == [
        "required suite 'unit' did not run in full: --ignore unit/test_b.py",
        QUALIFY.format(suite="unit"),
    ], exc.value.reasons


def test_the_plugins_own_not_applicable_deselection_is_listed_not_a_partial_suite(pytester: pytest.Pytester) -> None:
    """The baseline gate without --sskj-baseline is deselected by the plugin: outcomes.json lists it as not
    applicable (with the reason) and does not count it as a user's deselection; a -k deselection still counts."""
    pytester.makepyfile(
        test_na_gate="""
        def test_baseline(sskj_baseline_config):  # parametrized by the plugin with the run's configurations
            pass

        def test_other():
            pass
        """
    )
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--reports-dir", "rep", "--run-id", "na")
    outcomes = res.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("deselected", 0) >= 1, outcomes
    sel = json.loads((pytester.path / "rep" / "na" / "outcomes.json").read_text())["selection"]
    assert sel["deselected"] == {}, f"the plugin's own deselection is not a user's: {sel}"
    assert len(sel["not_applicable"]) == outcomes["deselected"], sel["not_applicable"]
    assert all("test_baseline[" in n and "--sskj-baseline" in w for n, w in sel["not_applicable"].items())
    res = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--reports-dir", "rep", "--run-id", "k", "-k", "baseline"
    )
    sel = json.loads((pytester.path / "rep" / "k" / "outcomes.json").read_text())["selection"]
    assert sum(sel["deselected"].values()) == 1, f"a -k deselection (test_other) counts: {sel}"


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_inner_loop_and_slow_phase_together_are_the_suite_in_full(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    """CI runs ``pytest unit/`` (slow checks deselected) and ``pytest unit/ --run-slow -m slow`` as two sessions:
    judged together they ran the whole suite (a release); either alone, or two runs that both miss a test, not.
    Under xdist the deselection happens on the workers only: it must reach outcomes.json all the same."""
    pytester.makepyfile(
        **{
            "unit/conftest.py": SLOW_CONFTEST,
            "unit/test_a.py": (
                "import pytest\ndef test_fast():\n    pass\ndef test_other():\n    pass\n"
                "@pytest.mark.slow\ndef test_slow():\n    pass\n"
            ),
        }
    )
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["unit"]\n')
    opts = ("--reports-dir", "rep", "-p", "no:cacheprovider")
    pytester.runpytest("unit", "--run-id", "fast", *opts, *workers).assert_outcomes(passed=2)
    pytester.runpytest("unit", "--run-slow", "-m", "slow", "--run-id", "slow", *opts).assert_outcomes(passed=1)
    pytester.runpytest("unit", "-k", "fast", "--run-id", "k", *opts).assert_outcomes(passed=1)
    cfg = load_config(pytester.path / "release.toml")
    out = mark(["fast", "slow"], "both", reports_dir=pytester.path / "rep", config=cfg)
    assert json.loads(out.read_text())["counts"] == {"passed": 3}, "all three tests, from the two sessions"
    with pytest.raises(ReleaseRefused) as alone:
        mark("fast", "alone", reports_dir=pytester.path / "rep", config=cfg)
    assert alone.value.reasons == [
        "required suite 'unit' did not run in full: 1 test(s) deselected",
        QUALIFY.format(suite="unit"),
    ]
    with pytest.raises(ReleaseRefused) as gap:
        mark(["slow", "k"], "gap", reports_dir=pytester.path / "rep", config=cfg)
    assert "required suite 'unit' did not run in full: selected with -k 'fast'" in gap.value.reasons, (
        f"test_other ran in neither session: expected a refusal naming the -k run, got {gap.value.reasons}"
    )
    assert latest_runs(pytester.path / "rep", cfg) == ["slow", "fast"], "the -k debugging run never stands in"
    latest = mark(None, "latest", reports_dir=pytester.path / "rep", config=cfg)
    assert json.loads(latest.read_text())["run_id"] == ["slow", "fast"], "no --run: the README's two sessions"


def test_a_refusal_is_ranked_and_short_and_the_full_list_is_behind_verbose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 27: a GPU-scope refusal on a CPU box was 45 lines.  The CLI prints at most six ranked reason
    lines (failures before skips, skips grouped by reason with a count, the --scope cpu hint), --verbose all."""
    gpu_skip = "Skipped: needs 1 x GPU, found 0 GPUs (NVML: no driver)"
    tests = [
        *GREEN[:3],
        *(_test(f"unit/test_gpu.py::test_k{i}", "skipped", "setup", gpu_skip) for i in range(30)),
        _test("unit/test_b.py::test_boom", "failed", "call", "AssertionError: expected 3\nseen 4"),
    ]
    _run(tmp_path, tests)
    (tmp_path / "release.toml").write_text('[release]\nrequired_suites = ["unit", "acceptance"]\n')
    argv = ["release", "mark", "--run", "r1", "--tag", "v1", "--reports-dir", str(tmp_path)]
    argv += ["--config", str(tmp_path / "release.toml")]
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) <= 8, err
    assert err[1].startswith("  1. required test unit/test_b.py::test_boom failed (in call): AssertionError"), err
    assert "30 required test(s) skipped: Skipped: needs 1 x GPU" in err[2], err
    assert "--scope cpu" in err[3], err
    assert main([*argv, "--verbose"]) == 1
    assert len(capsys.readouterr().err.splitlines()) == 32, "every reason, one line each (the failure has two)"


def test_rank_reasons_puts_run_problems_first_and_groups_skips() -> None:
    reasons = [
        "required test unit/a.py::t skipped (in setup): Skipped: x (not accepted by scope 'gpu')",
        "required suite 'unit' did not run in full: 3 test(s) deselected",
        "required test unit/b.py::t failed (in call): boom",
        "manifest.json status is 'running', not 'finished'",
        "required test unit/c.py::t skipped (in setup): Skipped: x (not accepted by scope 'gpu')",
    ]
    assert rank_reasons(reasons, scope="gpu") == [
        "manifest.json status is 'running', not 'finished'",
        "required test unit/b.py::t failed (in call): boom",
        "required suite 'unit' did not run in full: 3 test(s) deselected",
        "2 required test(s) skipped: Skipped: x (not accepted by scope 'gpu'), e.g. unit/a.py::t",
    ]


_PHASED = {
    "unit/conftest.py": SLOW_CONFTEST,
    # as unit/twin/conftest.py: its end-to-end file runs only in a session that names unit/twin
    "unit/twin/conftest.py": (
        "from pathlib import Path\n"
        "HERE = Path(__file__).resolve().parent\n"
        "def pytest_collection_modifyitems(config, items):\n"
        "    named = [Path(str(a).split('::')[0]).resolve() for a in config.args]\n"
        "    if any(p == HERE or HERE in p.parents for p in named):\n"
        "        return\n"
        "    e2e = [i for i in items if i.path.name == 'test_phased_e2e.py']\n"
        "    config.hook.pytest_deselected(items=e2e)\n"
        "    items[:] = [i for i in items if i not in e2e]\n"
    ),
    "unit/test_phased_a.py": (
        "import pytest\ndef test_fast():\n    pass\n@pytest.mark.slow\ndef test_slow():\n    pass\n"
    ),
    "unit/twin/test_phased_model.py": "def test_model():\n    pass\n",
    "unit/twin/test_phased_e2e.py": "import pytest\npytestmark = pytest.mark.slow\ndef test_job():\n    pass\n",
}


def _phased(pytester: pytest.Pytester, fail_e2e: bool = False) -> tuple[Path, ReleaseConfig]:
    files = dict(_PHASED)
    if fail_e2e:
        files["unit/twin/test_phased_e2e.py"] = (
            "import pytest\npytestmark = pytest.mark.slow\ndef test_job():\n    assert 0\n"
        )
    pytester.makepyfile(**files)
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makefile(".toml", release='[release]\nrequired_suites = ["unit"]\n')
    return pytester.path / "rep", load_config(pytester.path / "release.toml")


def test_ci_phases_that_together_ran_the_whole_collection_are_released_whatever_the_split(
    pytester: pytest.Pytester,
) -> None:
    """Issue 22/27: CI runs unit/ as three sessions -- the inner loop, the slow phase (-m slow) and the twin phase
    (a sub-path, unit/twin/, whose end-to-end file both other sessions deselect).  Each run records its collection;
    together they ran all of it, so the README's `release mark` (no --run) marks them; any two of them leave a
    test uncovered and are refused naming it; another split (-k a / -k 'not a') is the suite in full too."""
    rep, cfg = _phased(pytester)
    opts = ("--reports-dir", "rep", "-p", "no:cacheprovider")
    pytester.runpytest("unit", "--run-id", "inner", *opts).assert_outcomes(passed=2)
    pytester.runpytest("unit", "--run-slow", "-m", "slow", "--run-id", "slow", *opts).assert_outcomes(passed=1)
    pytester.runpytest("unit/twin", "--run-slow", "--run-id", "twin", *opts).assert_outcomes(passed=2)
    sel = json.loads((rep / "inner" / "outcomes.json").read_text())["selection"]
    assert sel["collection"]["unit"] == sorted(
        [
            "unit/test_phased_a.py::test_fast",
            "unit/test_phased_a.py::test_slow",
            "unit/twin/test_phased_e2e.py::test_job",
            "unit/twin/test_phased_model.py::test_model",
        ]
    ), "a run records every test it found, deselected ones included"
    assert latest_runs(rep, cfg) == ["slow", "inner", "twin"], "whole-suite runs first, then the twin phase"
    data = json.loads(mark(None, "ci", reports_dir=rep, config=cfg).read_text())
    assert data["run_id"] == ["slow", "inner", "twin"] and data["counts"] == {"passed": 4}, data["counts"]
    with pytest.raises(ReleaseRefused) as two:
        mark(["inner", "slow"], "two", reports_dir=rep, config=cfg)
    assert two.value.reasons[0] == (
        "required suite 'unit' did not run in full: 1 of its 4 test(s) ran in none of the runs (inner, slow), "
        "e.g. unit/twin/test_phased_e2e.py::test_job"
    ), two.value.reasons
    with pytest.raises(ReleaseRefused) as sub:
        mark(["twin"], "sub", reports_dir=rep, config=cfg)
    assert sub.value.reasons == [
        "required suite 'unit' did not run in full: only 'unit/twin' was selected",
        QUALIFY.format(suite="unit"),
    ]
    ka = ("unit", "unit/twin", "--run-slow", "-k", "fast or job", "--run-id", "ka")  # names unit/twin: e2e kept
    pytester.runpytest(*ka, *opts).assert_outcomes(passed=2)
    pytester.runpytest("unit", "--run-slow", "-k", "slow or model", "--run-id", "kb", *opts).assert_outcomes(passed=2)
    assert json.loads(mark(["ka", "kb"], "k", reports_dir=rep, config=cfg).read_text())["counts"] == {"passed": 4}


def test_a_test_that_failed_in_any_phase_refuses_and_path_runs_alone_never_cover(pytester: pytest.Pytester) -> None:
    rep, cfg = _phased(pytester, fail_e2e=True)
    opts = ("--reports-dir", "rep", "-p", "no:cacheprovider")
    pytester.runpytest("unit", "--run-id", "inner", *opts).assert_outcomes(passed=2)
    pytester.runpytest("unit", "--run-slow", "-m", "slow", "--run-id", "slow", *opts).assert_outcomes(passed=1)
    pytester.runpytest("unit/twin", "--run-slow", "--run-id", "twin", *opts).assert_outcomes(passed=1, failed=1)
    with pytest.raises(ReleaseRefused) as exc:
        mark(None, "ci", reports_dir=rep, config=cfg)
    assert exc.value.reasons == ["required test unit/twin/test_phased_e2e.py::test_job failed (in call): assert 0"], (
        exc.value.reasons
    )
    pytester.runpytest("unit/test_phased_a.py", "--run-slow", "--run-id", "a", *opts).assert_outcomes(passed=2)
    with pytest.raises(ReleaseRefused) as paths:
        mark(["a", "twin"], "paths", reports_dir=rep, config=cfg)
    assert paths.value.reasons[0].startswith(
        "required suite 'unit' did not run in full: no run (a, twin) collected the whole suite"
    ), paths.value.reasons


def test_readme_and_release_mark_help_state_the_same_rule(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27: README, `.ci/run` and `release --help` say the same thing about which runs a mark judges."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["release", "mark", "--help"])
    helptext = capsys.readouterr().out

    def flat(text: str) -> str:
        return re.sub(r"\s+", " ", text.replace("`", ""))

    for claim in (
        "Several runs of a suite cover it together when every test of its collection (each run records what it "
        "found, deselected tests included) ran in at least one of them and none failed in any",
        "as long as one of the runs collected the whole suite. Without --run it judges the newest runs that cover "
        "each required suite: the newest pytest acceptance/",
        "the newest runs of a path below it (pytest unit/twin/ --run-slow",
    ):
        assert claim in flat(readme), f"README's release section should say: {claim}"
        assert claim in flat(helptext), f"release mark --help should say: {claim}"
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert re.search(
        r'tag="ci-cpu-[^\n]*\n\s+python -m pytest_sskj release mark --tag "\$tag" --scope cpu \|\| rc_rel=\$\?', ci
    ), "CI runs the README's mark"
    assert 'python -m pytest_sskj release show "$tag"' in ci, "CI prints the mark it made (issue 45)"
    assert re.search(r'if \[ "\$rc_rel" -ne 0 \]; then\n(.*\n)?\s+exit "\$rc_rel"', ci), "a refused mark fails CI"
