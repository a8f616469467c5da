"""The accuracy gates' settings through the option schema: --sskj-accuracy-set / -questions / -concurrency /
-extract / -max-tokens / -min, profile keys, bad input refused at parse time (nothing launched, no run folder),
the accuracy tests deselected with their reason when the job has no question set, and the parameters they get."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.acceptance import accuracy
from pytest_sskj.accuracy.gate import Margin
from pytest_sskj.accuracy.generate import items, write
from pytest_sskj.accuracy.gsm8k import AccuracySetError
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


@pytest.fixture
def qfile(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "gsm.jsonl"
    write(items(12, 1), path)
    return path


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*args).stash[SETTINGS_KEY]


def test_no_question_set_by_default_and_the_users_defaults_when_one_is_given(
    pytester: pytest.Pytester, qfile: Path
) -> None:
    s = _settings(pytester)
    assert s.accuracy_set is None and s.accuracy_min is None and s.as_dict()["accuracy_set"] is None
    s = _settings(pytester, "--sskj-accuracy-set", f"gsm8k={qfile}", "--sskj-accuracy-questions", "12")
    assert s.accuracy_set is not None and s.accuracy_set.records == 12 and len(s.accuracy_set.sha256) == 64
    assert s.accuracy_concurrencies == (1, 8) and s.accuracy_extract == "flexible" and s.accuracy_max_tokens == 256
    assert s.as_dict()["accuracy_set"]["path"] == str(qfile)


def test_profile_sets_the_accuracy_keys_and_the_command_line_wins(pytester: pytest.Pytester, qfile: Path) -> None:
    profile = pytester.path / "p.toml"
    profile.write_text(
        f'accuracy_set = "gsm8k={qfile}"\naccuracy_questions = 10\naccuracy_min = "delta>=-2pt"\n'
        'accuracy_concurrencies = "1,8"\naccuracy_extract = "strict"\n'
    )
    s = _settings(pytester, "--profile", str(profile))
    assert s.accuracy_min == Margin(2.0) and s.sources["accuracy_min"] == "profile" and s.accuracy_questions == 10
    assert s.accuracy_extract == "strict" and s.as_dict()["accuracy_min"] == "delta>=-2pt"
    s = _settings(pytester, "--profile", str(profile), "--sskj-accuracy-min", "none")
    assert s.accuracy_min is None and s.sources["accuracy_min"] == "cli"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--sskj-accuracy-set", "mmlu={q}"], "unknown question set 'mmlu' (known: gsm8k)"),
        (["--sskj-accuracy-set", "{q}"], "is not NAME=PATH; hint: --sskj-accuracy-set gsm8k="),
        (["--sskj-accuracy-set", "gsm8k={q}.missing"], "no such file"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-min", "delta>=-1"], "the unit is percentage points"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-min", "delta>=-1%"], "not '%'"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-questions", "0"], "0 must be at least 1"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-questions", "13"], "holds 12 record(s)"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-concurrency", "0"], "0 must be at least 1"),
        (["--sskj-accuracy-set", "gsm8k={q}", "--sskj-accuracy-extract", "loose"], "loose"),
        (["--sskj-accuracy-min", "delta>=-1pt"], "--sskj-accuracy-min: no question set to apply it to"),
    ],
)
def test_bad_accuracy_input_is_a_usage_error_before_anything_runs(
    pytester: pytest.Pytester, qfile: Path, args: list[str], says: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    argv = [a.replace("{q}", str(qfile)) for a in args]
    result = pytester.runpytest_inprocess(*argv, "--reports-dir", str(pytester.path / "r"), "-p", "no:cacheprovider")
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + err
    assert says in err and "accepted:" in err, err
    assert not (pytester.path / "r").exists(), "nothing may be written before the options are accepted"


def test_a_bad_record_in_the_file_is_refused_with_its_line(pytester: pytest.Pytester, qfile: Path) -> None:
    qfile.write_text(qfile.read_text() + '{"question": "q", "answer": "no number"}\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--sskj-accuracy-set", f"gsm8k={qfile}", "-p", "no:cacheprovider")
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "line 13" in err and "####" in err, err


def test_a_file_changed_after_parsing_is_refused_when_the_questions_are_asked(
    pytester: pytest.Pytester, qfile: Path
) -> None:
    ref = _settings(pytester, "--sskj-accuracy-set", f"gsm8k={qfile}", "--sskj-accuracy-questions", "5").accuracy_set
    assert ref is not None and ref.read().records == 12
    write(items(12, 2), qfile)
    with pytest.raises(AccuracySetError, match="changed during the run"):
        ref.read()


def test_without_a_question_set_the_accuracy_tests_are_deselected_with_their_reason(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_inprocess(str(ACCEPTANCE), "--co", "-q", "-p", "no:cacheprovider")
    out = result.stdout.str()
    assert "test_accuracy.py::" not in out and "deselected" in out, out
    s = _settings(pytester)
    assert accuracy.not_applicable(s, "sskj_accuracy", None) is not None
    assert "--sskj-accuracy-set gsm8k=PATH" in str(accuracy.not_applicable(s, "sskj_accuracy_comparison", None))


def test_each_arm_and_accuracy_concurrency_is_a_test_and_each_candidate_a_gate(
    pytester: pytest.Pytester, qfile: Path
) -> None:
    s = _settings(
        pytester, "--engine", "embedded", "--backend", "parallel,q8_0,parallel", "--concurrency", "16",
        "--chunk", "256,512", "--sskj-accuracy-set", f"gsm8k={qfile}", "--sskj-accuracy-questions", "12",
        "--sskj-accuracy-min", "delta>=-1pt",
    )  # fmt: skip
    assert [k.id for k in accuracy.keys(s)] == [
        "parallel-acc-c1", "q8_0-acc-c1", "parallel@2-acc-c1", "parallel-acc-c8", "q8_0-acc-c8", "parallel@2-acc-c8",
    ]  # fmt: skip
    gates = accuracy.comparisons(s)
    assert [g.id for g in gates][:2] == ["parallel@2-vs-parallel-acc-c1", "q8_0-vs-parallel-acc-c1"]
    assert gates[0].is_control and not gates[1].is_control
    host = accuracy.host_point(s, "q8_0", None)
    assert host.id == "q8_0-chunk256-c16-r1", "the first chunk's first repeat answers the questions"
    assert accuracy.not_applicable(s, "sskj_accuracy_comparison", gates[0]) is None
    one = _settings(pytester, "--sskj-accuracy-set", f"gsm8k={qfile}", "--sskj-accuracy-questions", "12")
    assert "no accuracy margin" in str(accuracy.not_applicable(one, "sskj_accuracy_comparison", gates[0]))


def test_the_dry_run_states_the_questions_and_whether_they_can_decide_the_margin(
    pytester: pytest.Pytester, qfile: Path
) -> None:
    base = ("--engine", "embedded", "--backend", "parallel,q8_0", "--concurrency", "16", "--chunk", "256",
            "--sskj-accuracy-set", f"gsm8k={qfile}", "--sskj-accuracy-questions", "12")  # fmt: skip
    lines = accuracy.dry_run_lines(_settings(pytester, *base, "--sskj-accuracy-min", "delta>=-1pt"))
    assert "12 questions x C=1,8 x 2 arm(s) = 48 greedy requests of at most 256 tokens" in lines[0], lines
    assert "parallel-chunk256-c16-r1, q8_0-chunk256-c16-r1" in lines[0], lines
    assert "12 questions cannot decide it even with identical answers" in lines[1] and "would)" in lines[1], lines
    lines = accuracy.dry_run_lines(_settings(pytester, *base, "--sskj-accuracy-min", "delta>=-20pt"))
    assert "12 identical answers would decide it" in lines[1], lines
    assert accuracy.dry_run_lines(_settings(pytester, *base))[1].startswith("accuracy gate: none"), "no margin"


def test_a_plan_of_too_many_accuracy_requests_is_refused_naming_its_size(pytester: pytest.Pytester) -> None:
    big = pytester.path / "big.jsonl"
    write(items(85, 1), big)
    text = big.read_text()
    big.write_text(text * 400)  # 34,000 records
    pytester.makepyfile("def test_x(): pass")
    conc = ",".join(str(c) for c in range(1, 41))
    result = pytester.runpytest_inprocess(
        "--sskj-accuracy-set", f"gsm8k={big}", "--sskj-accuracy-questions", "30000",
        "--sskj-accuracy-concurrency", conc, "-p", "no:cacheprovider",
    )  # fmt: skip
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, err
    assert "= 2,400,000 greedy requests" in err and "at most 1,000,000 per run" in err, err
