"""Planted secrets (env tokens/passwords/keys, --sskj-env values, an SSH identity) never reach any file
the reporter writes: every file of the run directory and of --alluredir is searched for them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.redact import REDACTED
from pytest_sskj.report.scrub import scrub, scrub_text

ENV_SECRETS = {"HF_TOKEN": "hf_PLANTEDenvTOKEN0001", "DB_PASSWORD": "PLANTEDpw0002"}
SSKJ_ENV_SECRET = "PLANTEDapikey0003"
IDENTITY_MARK = "PLANTEDident0004"
KEY_MATERIAL = "PLANTEDkeymaterial0005"
SKIP_SECRET = "PLANTEDskip0006"

INNER = """
import os, pytest
from pathlib import Path
from pytest_sskj.report import allure as sa

IDENT = os.environ["IDENT_PATH"]
API = "PLANTEDapikey0003"
TOK = os.environ["HF_TOKEN"]
PW = os.environ["DB_PASSWORD"]
CMD = f"ssh -i {IDENT} -o IdentityFile={IDENT} 601 HF_TOKEN={TOK} python -m sglang.launch_server --api-key {API}"

def test_point(request, tmp_path):
    row = {"run_id": "r", "test_id": "t", "backend": "marlin", "chunk": 4096, "concurrency": 8, "repeat": 0,
           "status": "failed", "reasons": [f"[crash] server died; token {TOK}; cmd {CMD}"],
           "findings": [{"category": "oom", "severity": "fatal", "node": "601", "line": f"password={PW} {API}"}],
           "client_bound": False, "command": CMD, "input_throughput": 1.0, "median_ttft_ms": 2.0}
    request.config.hook.pytest_sskj_point_finished(config=request.config, result=row)
    request.config.hook.pytest_sskj_verdict(config=request.config, verdict={
        "kind": "comparison", "candidate": "flashinfer_mxfp4", "baseline": "marlin", "passed": False,
        "message": f"compared with {API} and {TOK}", "env": {"HF_TOKEN": TOK, "SSH_IDENTITY": IDENT}})
    with sa.step(f"launch {CMD}"):
        sa.attach_text("launch command", CMD)
        sa.attach_json("server env", {"HF_TOKEN": TOK, "DB_PASSWORD": PW, "argv": CMD.split(), "note": API})
        sa.attach_csv("env", [{"name": "HF_TOKEN", "value": TOK}, {"name": "X", "value": API}])
        log = tmp_path / "server.log"
        log.write_text(f"starting with {TOK}\\nssh -i {IDENT} node601\\n{API}\\n")
        sa.attach_file(log)
    sa.parameters(cmd=CMD)
    sa.metric_parameters(note=API)

def test_skipped():
    pytest.skip("needs token " + os.environ["SKIP_TOKEN"])
"""


def _grep(paths: list[Path], needles: list[str]) -> list[str]:
    hits = []
    for p in paths:
        data = p.read_bytes()
        hits.extend(f"{p}: {n}" for n in needles if n.encode() in data)
    return hits


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_planted_secrets_reach_no_written_file(tmp_path: Path) -> None:
    (tmp_path / "acceptance").mkdir()
    (tmp_path / "acceptance" / "test_inner.py").write_text(INNER)
    keys = tmp_path / "keys"
    keys.mkdir()
    ident = keys / f"id_{IDENTITY_MARK}"
    ident.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_MATERIAL}\n-----END OPENSSH PRIVATE KEY-----\n")
    env = {**os.environ, **ENV_SECRETS, "IDENT_PATH": str(ident), "SKIP_TOKEN": SKIP_SECRET}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:hypothesispytest",
            "-p",
            "no:cacheprovider",
            "--alluredir",
            "ar",
            "--reports-dir",
            "rep",
            "--run-id",
            "r1",
            "--engine",
            "sglang",
            "--sskj-env",
            f"MY_API_KEY={SSKJ_ENV_SECRET}",
            "--sskj-ssh-identity",
            str(ident),
            "acceptance",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "1 passed, 1 skipped" in res.stdout, res.stdout[-3000:] + res.stderr[-2000:]
    run_files = [p for p in (tmp_path / "rep").rglob("*") if p.is_file()]
    allure_files = [p for p in (tmp_path / "ar").rglob("*") if p.is_file()]
    names = {p.name for p in run_files}
    assert {"results.csv", "results.json", "verdicts.json", "summary.md", "outcomes.json", "manifest.json"} <= names
    assert any(p.name.endswith("-attachment.txt") for p in allure_files)
    assert (tmp_path / "ar" / "environment.properties").is_file()
    needles = [*ENV_SECRETS.values(), SSKJ_ENV_SECRET, IDENTITY_MARK, KEY_MATERIAL]
    assert _grep(run_files + allure_files, needles) == [], "secrets leaked into written files"
    # the skip reason reaches outcomes.json redacted (allure-pytest writes its own copy of pytest's message)
    assert _grep(run_files, [SKIP_SECRET]) == []
    assert REDACTED in (tmp_path / "rep" / "r1" / "results.csv").read_text()
    outcomes = (tmp_path / "rep" / "r1" / "outcomes.json").read_text()
    assert "needs token" in outcomes and REDACTED in outcomes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ssh -i /home/u/.ssh/id_ed25519 601 uptime", f"ssh -i {REDACTED} 601 uptime"),
        ("ssh -o IdentityFile=/k/deploy 601", f"ssh -o IdentityFile={REDACTED} 601"),
        ("key at ~/.ssh/cluster_key", f"key at {REDACTED}"),
        ("HF_TOKEN=abc123xyz python", f"HF_TOKEN={REDACTED} python"),
        ("grep -i error server.log", "grep -i error server.log"),
    ],
)
def test_scrub_text_hides_ssh_identities_and_secret_pairs(text: str, expected: str) -> None:
    assert scrub_text(text) == expected


def test_scrub_redacts_secret_named_string_values_but_keeps_token_counts() -> None:
    data = {
        "HF_TOKEN": "hf_x",
        "ssh_identity": "/k/id",
        "total_input_tokens": 655360,
        "passed": True,
        "nested": [{"api_key": "k"}, "token v4lue9 is v4lue9"],
    }
    out = scrub(data, secrets=["v4lue9"])
    assert out == {
        "HF_TOKEN": REDACTED,
        "ssh_identity": REDACTED,
        "total_input_tokens": 655360,
        "passed": True,
        "nested": [{"api_key": REDACTED}, f"token {REDACTED} is {REDACTED}"],
    }
