"""A lost ssh connection that breaks the log stream in the middle of a line: the broken-off line is held back and
the resumed stream sends it again from its first byte, so the local log copy has every line whole, once, and the
launcher's own "stream resumed" line on a line of its own (seen once in CI: ``tick 24[sskj] node=... stream
resumed``).  The remote side is a local process standing in for ``ssh node sh -s``; the resume script's byte offset
is what it streams from."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from pytest_sskj.server.spec import NodeCommand
from pytest_sskj.server.ssh import RemoteState, SshProcess

REMOTE_LOG = "".join(f"tick {i}\n" for i in range(6))
BROKEN_AT = REMOTE_LOG.index("tick 3") + 4  # "tick" of line 3 arrived, then the connection died


def _remote(script: str) -> list[str]:
    """A stand-in remote: prints the first stream's bytes, or what the resume script asks for."""
    return [sys.executable, "-c", f"import sys; sys.stdout.write({script!r}); sys.stdout.flush()"]


class _Launcher:
    """What SshProcess uses of its launcher: the remote state and a new shell for the resumed stream."""

    def __init__(self) -> None:
        self.alive = True

    def remote_state(self, node: str, state_dir: str) -> RemoteState:
        return RemoteState(4242, None, self.alive)

    def _popen_shell(self, node: str) -> subprocess.Popen[bytes]:
        return _Resumed()  # type: ignore[return-value]


class _Resumed(subprocess.Popen):  # type: ignore[type-arg]
    """``ssh node sh -s``: reads the resume script on stdin, streams the remote log from its offset, exits 0."""

    def __init__(self) -> None:
        code = (
            "import re, sys\n"
            "script = sys.stdin.read()\n"
            "offset = int(re.search(r'tail -c [+](\\d+)', script).group(1)) - 1\n"
            "sys.stdout.write('[sskj] node=n rank=0 stream resumed at byte %d after a lost connection\\n' % offset)\n"
            f"sys.stdout.write({REMOTE_LOG!r}[offset:])\n"
            "sys.stdout.write('[sskj] node=n rank=0 pid=4242 exited with status 0\\n')\n"
        )
        super().__init__([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)  # fmt: skip


def _handle(tmp_path: Path, launcher: Any) -> SshProcess:
    first = "[sskj] node=n rank=0 pid=4242 started\n" + REMOTE_LOG[:BROKEN_AT]
    proc = subprocess.Popen(_remote(first), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cmd = NodeCommand("n", 0, ("python3", "-c", "pass"))
    return SshProcess(launcher, cmd, tmp_path / "rank0.log", "/state", proc, ())


def test_a_line_broken_by_a_lost_connection_is_sent_again_whole_by_the_resumed_stream(tmp_path: Path) -> None:
    h = _handle(tmp_path, _Launcher())
    h._proc.wait()
    assert h.poll() is None and h.resumes == 1, "the rank still runs: the stream is resumed"
    h._proc.wait()
    assert h.poll() == 0
    lines = h.log_path.read_text().splitlines()
    ticks = [line for line in lines if line.startswith("tick")]
    assert ticks == [f"tick {i}" for i in range(6)], f"every line whole, once: {lines}"
    resumed = [line for line in lines if "stream resumed" in line]
    assert resumed and resumed[0].startswith("[sskj] "), f"the launcher's line stands alone: {lines}"
    assert re.search(rf"at byte {REMOTE_LOG.index('tick 3')}\b", resumed[0]), resumed


def test_when_no_stream_resumes_the_broken_off_line_is_kept_as_it_came(tmp_path: Path) -> None:
    launcher = _Launcher()
    launcher.alive = False  # the rank is gone and left no status: nothing will send the line again
    h = _handle(tmp_path, launcher)
    h._proc.wait()
    h.poll()
    assert h.log_path.read_text().splitlines()[-1] == "tick", h.log_path.read_text()
