"""A secret server argument (``--api-key V``, ``--hf-token=V``) never appears on the command line of the
rank on its node (``ps`` / ``/proc/PID/cmdline`` are world-readable): the bootstrap script exports it and
the rank's Python wrapper substitutes it into ``sys.argv`` in-process.  Run here with ``sh -s`` exactly as
``ssh node sh -s`` runs it on a node."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pytest_sskj.server.remote_sh import bootstrap_script
from pytest_sskj.server.spec import NodeCommand

API = "sk-PLANTEDpsapi0201"
HF = "hf_PLANTEDpshf0202"

ECHO = """
import pathlib, sys, time
print("argv", sys.argv[1:], flush=True)
pathlib.Path(sys.argv[-1]).write_text("ready")
time.sleep(30)
"""


def _cmdlines_of_session(sid: int) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
                out.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return out


def test_secret_arguments_are_absent_from_the_ranks_command_line_but_reach_its_argv(tmp_path: Path) -> None:
    (tmp_path / "sskj_argv_echo.py").write_text(ECHO)
    ready = tmp_path / "ready"
    argv = (sys.executable, "-m", "sskj_argv_echo", "--api-key", API, f"--hf-token={HF}", "--tp", "8", str(ready))
    cmd = NodeCommand("601", 0, argv, (("PYTHONPATH", str(tmp_path)),))
    state = tmp_path / "state"
    script = bootstrap_script(cmd, str(state))
    assert API not in script.split("export SSKJ_SECRET_ARG_0=")[0], "the secret is exported, not on a line before"
    proc = subprocess.Popen(
        ["sh", "-s"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    assert proc.stdin is not None
    proc.stdin.write(script.encode())
    proc.stdin.close()
    try:
        deadline = time.perf_counter() + 30
        while not ready.exists() and time.perf_counter() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the rank did not start"
        pid = int((state / "pid").read_text())
        cmdlines = _cmdlines_of_session(pid)
        assert cmdlines, "no process found in the rank's session"
        leaked = [c for c in cmdlines if API in c or HF in c]
        assert leaked == [], f"secret visible in ps: {leaked}"
        assert any("@@SSKJ_SECRET_ARG_0@@" in c for c in cmdlines), cmdlines
        log = (state / "out.log").read_text()
        assert f"'--api-key', '{API}', '--hf-token={HF}', '--tp', '8'" in log, log
    finally:
        if (state / "pid").is_file():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int((state / "pid").read_text()), signal.SIGTERM)
        proc.wait(timeout=30)


def test_a_secret_argument_of_a_non_python_program_is_refused_on_the_node(tmp_path: Path) -> None:
    cmd = NodeCommand("601", 0, ("/bin/echo", "--api-key", API))
    res = subprocess.run(
        ["sh", "-s"], input=bootstrap_script(cmd, str(tmp_path / "s")), capture_output=True, text=True, timeout=30
    )
    assert res.returncode == 96, (res.returncode, res.stdout, res.stderr)
    assert "is no Python program" in res.stderr and "--sskj-env" in res.stderr, res.stderr
    assert API not in res.stdout + res.stderr
