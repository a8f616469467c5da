"""Secrets given as *server arguments* (``--sskj-server-arg=--api-key=V``, the two-argument
``--sskj-server-arg=--hf-token --sskj-server-arg=V``, ``SSKJ_SERVER_ARGS``) are recognised by the
argument's name and reach no artefact: dry-run output, manifest (recorded invocation args included),
result rows, summary, outcomes, copied server logs, Allure results, terminal lines.  Non-secret
fields named like keys (``spec_key``) stay readable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.redact import (
    REDACTED,
    is_secret_flag,
    is_secret_name,
    redact_argv,
    redact_text,
    secret_arg_values,
)
from pytest_sskj.report.scrub import scrub

ROOT = Path(__file__).resolve().parents[2]
HF_TWO_ARG = "hf_PLANTEDtwoarg0101"
API_EQ = "sk-PLANTEDapieq0102"
SECRET_FLAG = "PLANTEDsecretflag0104"
ADMIN_KEY = "PLANTEDadminkey0105"


@pytest.mark.parametrize(
    "flag",
    ["--api-key", "--hf-token", "--token", "--password", "--my-secret-thing", "--admin-key", "--ssl-key", "-i"],
)
def test_secret_flags_are_recognised_by_name(flag: str) -> None:
    assert is_secret_flag(flag), f"{flag} should be a secret flag"


@pytest.mark.parametrize(
    "name",
    ["spec_key", "--max-prefill-tokens", "--tokenizer-path", "total_input_tokens", "--skip-tokenizer-init", "key"],
)
def test_names_that_only_look_like_keys_are_not_secret(name: str) -> None:
    assert not is_secret_name(name.lstrip("-")), f"{name} is not a secret"


def test_both_argument_forms_are_redacted_in_argv_and_text() -> None:
    argv = ["sglang", "--api-key=sk-AAAA1", "--hf-token", "hf_BBBB2", "--max-prefill-tokens", "16384", "--tp", "8"]
    assert secret_arg_values(argv) == ("sk-AAAA1", "hf_BBBB2")
    assert redact_argv(argv) == [
        "sglang",
        f"--api-key={REDACTED}",
        "--hf-token",
        REDACTED,
        "--max-prefill-tokens",
        "16384",
        "--tp",
        "8",
    ]
    text = "launch: sglang --api-key sk-AAAA1 --hf-token=hf_BBBB2 --max-prefill-tokens 16384"
    assert redact_text(text) == f"launch: sglang --api-key {REDACTED} --hf-token={REDACTED} --max-prefill-tokens 16384"


def test_spec_key_is_not_redacted_but_api_key_is() -> None:
    out = scrub({"spec_key": "0123456789ab", "api_key": "sk-x", "key": "abc"})
    assert out == {"spec_key": "0123456789ab", "api_key": REDACTED, "key": "abc"}


def _pytest(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args],
        cwd=tmp,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )


def _hits(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            hits += [f"{p.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return hits


SERVER_ARGS = [f"--api-key={API_EQ}", "--hf-token", HF_TWO_ARG, f"--my-secret={SECRET_FLAG}", "--admin-key", ADMIN_KEY]


@pytest.mark.parametrize("source", ["cli", "env"])
def test_dry_run_shows_no_planted_server_arg_secret(tmp_path: Path, source: str) -> None:
    cli = [f"--sskj-server-arg={a}" for a in SERVER_ARGS] if source == "cli" else []
    env = {"SSKJ_SERVER_ARGS": " ".join(SERVER_ARGS)} if source == "env" else {}
    res = _pytest(
        tmp_path,
        str(ROOT / "acceptance"),
        *("--engine", "sglang", "--nodes", "localhost", "--tp", "1", "--sskj-dry-run"),
        *cli,
        env=env,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "--api-key=" + REDACTED in out and f"--hf-token '{REDACTED}'" in out, out[-3000:]
    for needle in (API_EQ, HF_TWO_ARG, SECRET_FLAG, ADMIN_KEY):
        assert needle not in out, f"{needle} printed by the dry run"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_planted_server_arg_secrets_reach_no_artefact_of_a_real_run(tmp_path: Path) -> None:
    """A real embedded run (the server echoes its arguments into its log, like SGLang) with secrets as
    server arguments in both forms and through ``SSKJ_SERVER_ARGS``; every file of the run dir and of
    --alluredir, and the terminal output, are searched for the values."""
    res = _pytest(
        tmp_path,
        str(ROOT / "acceptance"),
        "-k",
        "test_serving",
        "--alluredir",
        "ar",
        "--reports-dir",
        "rep",
        "--run-id",
        "planted",
        "--isl",
        "64",
        "--osl",
        "2",
        "--requests",
        "2",
        "--repeats",
        "1",
        "--chunk",
        "512",
        "--backend",
        "parallel",
        "--concurrency",
        "2",
        "--sskj-search",
        "none",
        "--sskj-allow-client-bound",  # what is checked is redaction; a loaded box's client-bound flag is not
        "--sskj-server-arg=--hf-token",
        f"--sskj-server-arg={HF_TWO_ARG}",
        "-rA",
        "-v",
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    run = tmp_path / "rep" / "planted"
    names = {p.name for p in run.rglob("*") if p.is_file()}
    assert {"manifest.json", "results.csv", "results.json", "summary.md", "outcomes.json", "result.json"} <= names
    logs = [p for p in (run / "logs").rglob("*") if p.is_file()]
    assert logs and any("server args" in p.read_text(errors="replace") for p in logs), "the server echoed no args"
    assert any(REDACTED in p.read_text(errors="replace") for p in logs), "the echoed token was not redacted"
    assert _hits(run, [HF_TWO_ARG]) == [], "planted secret in the run dir"
    assert _hits(tmp_path / "ar", [HF_TWO_ARG]) == [], "planted secret in the Allure results"
    assert HF_TWO_ARG not in out, "planted secret on the terminal"
    csv = (run / "results.csv").read_text()
    if "spec_key" in csv.splitlines()[0]:
        assert REDACTED not in csv.splitlines()[1].split(",")[csv.splitlines()[0].split(",").index("spec_key")]
