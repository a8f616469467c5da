"""URL credentials (``--target-url http://user:PW@host:port``) reach no terminal line and no file: the
start line, the plan, measurement.json, points/*/result-r*.json, requests.jsonl and the manifest are
searched for the planted password after a real run against a server on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.redact import REDACTED, redact_url, url_without_userinfo
from pytest_sskj.testing.mock_server import MockConfig, MockServer

ROOT = Path(__file__).resolve().parents[2]
PW = "PLANTEDurlpw0301"


def test_userinfo_is_dropped_from_a_url_nothing_authenticates_with() -> None:
    assert url_without_userinfo(f"http://ann:{PW}@127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert url_without_userinfo("http://[::1]:8000") == "http://[::1]:8000"
    assert redact_url(f"postgresql://ann:{PW}@db:5432/x") == f"postgresql://ann:{REDACTED}@db:5432/x"


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_target_url_password_reaches_no_terminal_line_and_no_file(tmp_path: Path) -> None:
    with MockServer(MockConfig(ttft_ms=1)) as srv:
        url = srv.url.replace("http://", f"http://ann:{PW}@")
        res = subprocess.run(
            [
                sys.executable,
                *("-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", str(ROOT / "acceptance")),
                *("-k", "test_serving", "--reports-dir", "rep", "--run-id", "url", "--target-url", url),
                *("--engine", "sglang", "--sskj-model", "m", "--isl", "32", "--osl", "2", "--requests", "2"),
                *(
                    "--repeats",
                    "1",
                    "--chunk",
                    "512",
                    "--concurrency",
                    "1",
                    "--backend",
                    "marlin",
                    "--sskj-search",
                    "none",
                ),
                *("--sskj-db", "none", "-v"),
            ],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    out = res.stdout + res.stderr
    assert "sskj: engine" in out and "target http://" in out, out[-3000:]
    assert PW not in out, "the password was printed"
    files = [p for p in (tmp_path / "rep").rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert "manifest.json" in names and "requests.jsonl" in names, (sorted(names), out[-3000:])
    leaked = [str(p.relative_to(tmp_path)) for p in files if PW.encode() in p.read_bytes()]
    assert leaked == [], f"the target URL's password is in {leaked}"
