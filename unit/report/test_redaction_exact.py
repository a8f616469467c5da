"""Redaction is exact: secret *names* are a list of words (``PWD`` is the working directory, not a
password), and a secret *value* shorter than six characters or standing as a path component is never
replaced blindly in free text (so a planted secret that happens to equal ``work`` does not rewrite
``/work/...`` paths in manifests and plans)."""

from __future__ import annotations

import pytest

from pytest_sskj.redact import REDACTED, is_secret_name, redact_env, redact_text
from pytest_sskj.report.scrub import scrub


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "passed", "PASSTHROUGH_MODE", "author", "tokenizer", "keyboard"])
def test_names_that_merely_contain_secret_letters_are_not_secret(name: str) -> None:
    assert not is_secret_name(name), f"{name!r} was taken for a secret name"


@pytest.mark.parametrize(
    "name", ["DB_PWD", "MYSQL_PWD", "HF_TOKEN", "SUDO_PASSWORD", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"]
)
def test_secret_names_from_the_list_are_secret(name: str) -> None:
    assert is_secret_name(name), f"{name!r} should be secret"


def test_the_working_directory_survives_env_redaction_and_scrub(tmp_path: object) -> None:
    cwd = "/work/wt/some-project"
    env = {"PWD": cwd, "OLDPWD": "/root", "HF_TOKEN": "hf_PLANTEDexact0001"}
    assert redact_env(env) == {"PWD": cwd, "OLDPWD": "/root", "HF_TOKEN": REDACTED}
    out = scrub({"cwd": cwd, "plan": f"run in {cwd}"}, secrets=["hf_PLANTEDexact0001"])
    assert out == {"cwd": cwd, "plan": f"run in {cwd}"}


def test_short_secret_values_are_not_replaced_blindly() -> None:
    assert redact_text("ok 12345 abc", secrets=["12345", "abc"]) == "ok 12345 abc"
    assert redact_text("tok PLANTED6", secrets=["PLANTED6"]) == f"tok {REDACTED}"


def test_a_secret_value_standing_as_a_path_component_keeps_the_path() -> None:
    text = "reports in /home/secretuser/run and password secretuser."
    assert redact_text(text, secrets=["secretuser"]) == f"reports in /home/secretuser/run and password {REDACTED}."
    # a secret that is itself a path (an SSH identity) is replaced whole
    assert redact_text("key /k/id_x9 used", secrets=["/k/id_x9"]) == f"key {REDACTED} used"
