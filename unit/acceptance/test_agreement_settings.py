"""The output-agreement settings: --sskj-agreement-min / --sskj-agreement-prompts, profile keys, bad input."""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.agreement import AgreementGate
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*args).stash[SETTINGS_KEY]


def test_default_gate_is_first_token_agreement_of_095_on_32_prompts(pytester: pytest.Pytester) -> None:
    s = _settings(pytester)
    assert s.agreement_min == (AgreementGate("first_token_agreement_frac", 0.95),)
    assert s.agreement_prompts == 32
    assert s.as_dict()["agreement_min"] == ["first_token_agreement_frac>=0.95"]


def test_profile_sets_the_gate_and_the_command_line_wins(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = pytester.path / "p.toml"
    profile.write_text('agreement_min = "identical_seq_frac>=1"\nagreement_prompts = 24\n')
    s = _settings(pytester, "--profile", str(profile))
    assert s.agreement_min == (AgreementGate("identical_seq_frac", 1.0),) and s.sources["agreement_min"] == "profile"
    assert s.agreement_prompts == 24
    monkeypatch.setenv("SSKJ_AGREEMENT_MIN", "0.9")
    assert _settings(pytester, "--profile", str(profile)).agreement_min == (
        AgreementGate("first_token_agreement_frac", 0.9),
    )
    s = _settings(pytester, "--profile", str(profile), "--sskj-agreement-min", "none", "--sskj-agreement-prompts", "0")
    assert s.agreement_min == () and s.agreement_prompts == 0


@pytest.mark.parametrize(
    ("value", "says"),
    [("1.2", "fraction in [0, 1]"), ("first_token>=0.9", "not an agreement figure"), ("0.9,", "empty gate")],
)
def test_bad_gate_is_a_usage_error_at_parse_time(pytester: pytest.Pytester, value: str, says: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_inprocess("--sskj-agreement-min", value, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert "--sskj-agreement-min on the command line" in err and says in err, err
    assert "accepted: gates like first_token_agreement_frac>=0.95" in err and "Hint:" in err, err
