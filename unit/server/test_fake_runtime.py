"""The stand-in container runtime CLI itself: each subcommand's output, exit status and state files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.testing import fake_runtime
from pytest_sskj.testing.fake_runtime import main

IMAGE, IMAGE_ID = "lmsysorg/sglang:test", "sha256:feedbeef"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "state"
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_DIR", str(d))
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_IMAGE", IMAGE)
    monkeypatch.setenv("SSKJ_FAKE_RUNTIME_ID", IMAGE_ID)
    return d


def test_image_inspect_ps_rm_and_unknown_commands(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["image", "inspect", "--format", "{{.Id}}", IMAGE]) == 0
    assert capsys.readouterr().out == IMAGE_ID + "\n"
    assert main(["image", "inspect", "--format", "{{.Id}}", "other:1"]) == 1
    assert capsys.readouterr().err == "Error: no such image other:1\n"
    assert main(["ps", "-a", "-q", "--filter", "name=^rank0$"]) == 0
    assert capsys.readouterr().out == "", "no container of that name"
    (state / "rank0").write_text("not a pid")
    assert main(["ps", "-a", "-q", "--filter", "name=^rank0$"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("c0ffee") and len(out.strip()) == 12, out
    assert main(["rm", "-f", "rank0"]) == 0 and not (state / "rank0").exists(), "an unreadable pid is still removed"
    assert main(["rm", "-f", "rank0"]) == 0, "removing what is not there is fine"
    assert main(["pull", IMAGE]) == 2
    assert capsys.readouterr().err == "fake runtime: unsupported command pull\n"


def test_run_of_an_unknown_image_fails_like_docker(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--rm", "--name", "r", "-v", "/a:/b", "other:1", "true"]) == 125
    assert capsys.readouterr().err == "Unable to find image 'other:1' locally\n"
    assert json.loads((state / "runs.jsonl").read_text()) == [
        "run",
        "--rm",
        "--name",
        "r",
        "-v",
        "/a:/b",
        "other:1",
        "true",
    ]
    assert not (state / "r").exists(), "nothing ran under the name"


def test_run_replaces_itself_with_the_command_in_the_named_container(state: Path) -> None:
    env = {**os.environ, "PASSED": "from-caller", "NOT_PASSED": "hidden"}
    argv = ["run", "--rm", "--name", "rank1", "-e", "SET=1", "-e", "PASSED", "-e", "MISSING", "--gpus", "all"]
    script = 'echo "$SET|$PASSED|${MISSING-unset}|${NOT_PASSED-unset}|$HOME"; cat /proc/self/stat | cut -d" " -f5'
    res = subprocess.run(
        [sys.executable, fake_runtime.__file__, *argv, IMAGE, "sh", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        start_new_session=True,
    )
    assert res.returncode == 0, res.stderr
    values, pgid = res.stdout.splitlines()
    assert values == "1|from-caller|unset|unset|/root", "only -e names reach the container, HOME is the image's"
    assert (state / "rank1").read_text() == pgid, "the name's file holds the container's process group"
