"""Secret server arguments of a LOCAL server reach no process listing: the command line every user can
read (``/proc/<pid>/cmdline``, ``ps``) holds ``***REDACTED***`` while the server itself still receives
the real value (through a 0600 private file that is gone once it started, or through the environment);
a program that offers no other way is refused with the reason.  The real embedded run is read from
``/proc`` while it runs, and every file it wrote afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_sskj.errors import LauncherError
from pytest_sskj.redact import REDACTED
from pytest_sskj.server.process import ManagedProcess
from pytest_sskj.server.secret_argv import hide_secret_args

ROOT = Path(__file__).resolve().parents[2]
ECHO = "import sys,time; open(sys.argv[1],'w').write(repr(sys.argv[2:])); time.sleep(30)"


def _cmdlines() -> dict[int, str]:
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                pass
    return out


@pytest.mark.parametrize("spelling", ["two-args", "equals"])
def test_a_secret_argument_is_not_on_the_command_line_but_reaches_the_server(tmp_path: Path, spelling: str) -> None:
    secret = "hf_PLANTEDargv0201"
    script = tmp_path / "echo_server.py"
    script.write_text(ECHO)
    seen = tmp_path / "seen.txt"
    args = ["--hf-token", secret] if spelling == "two-args" else [f"--hf-token={secret}"]
    sys.path.insert(0, str(tmp_path))
    proc = ManagedProcess(
        [sys.executable, "-m", "echo_server", str(seen), *args, "--port", "1"],
        tmp_path / "logs" / "server.log",
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        secrets=[secret],
    )
    try:
        deadline = time.monotonic() + 60
        while not seen.exists() and time.monotonic() < deadline:
            assert secret not in " ".join(_cmdlines().values()), "the secret is in a process listing"
            time.sleep(0.05)
        assert seen.exists(), (tmp_path / "logs" / "server.log").read_text()
        time.sleep(0.2)
        mine = _cmdlines()[proc.pid]
        assert secret not in mine and REDACTED in mine, mine
        assert secret in seen.read_text(), f"the server did not receive the real value: {seen.read_text()}"
        private = tmp_path / "logs" / ".private"
        assert private.is_dir() and oct(private.stat().st_mode & 0o777) == "0o700"
        assert list(private.iterdir()) == [], "the private argv file outlived the server's start"
    finally:
        proc.terminate(5.0)
        sys.path.remove(str(tmp_path))


def test_a_native_program_gets_hf_token_through_the_environment_and_other_secrets_are_refused(
    tmp_path: Path,
) -> None:
    launch = hide_secret_args(["/bin/llama-server", "--hf-token=hf_PLANTEDenv0202", "--port", "1"], tmp_path)
    assert launch.argv == ("/bin/llama-server", "--port", "1") and launch.env == (("HF_TOKEN", "hf_PLANTEDenv0202"),)
    with pytest.raises(LauncherError, match=r"not a Python program.*--api-key=\*\*\*REDACTED\*\*\*.*--sskj-env"):
        hide_secret_args(["/bin/llama-server", "--api-key=sk-PLANTED0203"], tmp_path)


def test_no_secret_leaves_the_command_untouched(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "x", "--max-prefill-tokens", "16384"]
    assert hide_secret_args(argv, tmp_path).argv == tuple(argv)
    assert not (tmp_path / ".private").exists()


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_real_embedded_run_shows_no_planted_secret_in_ps_or_in_any_file(tmp_path: Path) -> None:
    """Secrets planted as env (HF_TOKEN) and as a server argument (``--hf-token=V``): ``/proc/*/cmdline``
    is read all through the run, every file of the run dir afterwards."""
    arg_secret, env_secret = "hf_PLANTEDps0204", "PLANTEDenvps0205"
    cmd = [
        sys.executable,
        *("-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", str(ROOT / "acceptance")),
        *("-k", "test_serving", "--reports-dir", "rep", "--run-id", "ps", "--isl", "64", "--osl", "2"),
        *("--requests", "2", "--repeats", "1", "--chunk", "512", "--backend", "parallel", "--concurrency", "1"),
        *("--sskj-search", "none", "--sskj-db", "none", "--sskj-allow-client-bound"),
    ]
    # the server argument comes from SSKJ_SERVER_ARGS: the user's own command line is theirs to keep clean
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HF_TOKEN": env_secret,
        "SSKJ_SERVER_ARGS": f"--hf-token={arg_secret}",
    }
    with subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as p:
        saw_server = False
        while p.poll() is None:
            lines = _cmdlines()
            leaks = [c for c in lines.values() if arg_secret in c or env_secret in c]
            assert leaks == [], f"planted secret in a process listing: {leaks}"
            saw_server = saw_server or any("pytest_sskj.server.embedded" in c for c in lines.values())
            time.sleep(0.1)
        out = p.stdout.read().decode() if p.stdout else ""
    assert p.returncode == 0, out[-3000:]
    assert saw_server, "the embedded server was never seen in /proc: the listing was not read during the run"
    assert arg_secret not in out and env_secret not in out
    leaked = [f for f in (tmp_path / "rep").rglob("*") if f.is_file() and (arg_secret.encode() in f.read_bytes())]
    assert leaked == [], f"planted secret in {leaked}"
