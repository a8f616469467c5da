"""A failing write ends the run as ``error`` with a one-line reason: a full disk (ENOSPC injected at
``rundir.atomic_write_bytes`` for a later point's result) stops the session, the manifest says
``error`` with the reason, the point finished before it is kept, and no line claims the files are
complete; a SQLite results database with a malformed page fails ``PRAGMA quick_check`` before the
first write and is never written to."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.history.db import CorruptDatabase, ResultsDB
from pytest_sskj.rundir import RunWriteError, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
INJECT = """
import errno, os
from pathlib import Path
import pytest_sskj.rundir as rd

_orig = rd.atomic_write_bytes
_n = [0]

def _failing(path, data, *, mode=None):
    p = Path(path)
    if "points" in p.parts and p.name == "result.json":
        _n[0] += 1
        if _n[0] > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(p))
    return _orig(path, data, mode=mode)

rd.atomic_write_bytes = _failing
"""


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_a_full_disk_ends_the_run_as_error_and_keeps_finished_points(tmp_path: Path) -> None:
    (tmp_path / "inject_enospc.py").write_text(INJECT)
    res = subprocess.run(
        [
            sys.executable,
            *("-m", "pytest", "-p", "inject_enospc", "-p", "no:cacheprovider", "-p", "no:hypothesispytest"),
            *(str(ROOT / "acceptance"), "-k", "test_serving", "--reports-dir", "rep", "--run-id", "full"),
            *("--isl", "32", "--osl", "2", "--requests", "2", "--repeats", "1", "--chunk", "512,1024"),
            *("--backend", "parallel", "--concurrency", "1", "--sskj-search", "none", "--sskj-allow-client-bound"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert "files are complete" not in out and "files hold every result" not in out, out[-3000:]
    assert "No space left on device" in out and "the run ends as error" in out, out[-3000:]
    manifest = json.loads((tmp_path / "rep" / "full" / "manifest.json").read_text())
    assert manifest["status"] == "error", manifest["status"]
    assert "No space left on device" in manifest["error"] and "\n" not in manifest["error"]
    kept = [p.parent.name for p in (tmp_path / "rep" / "full" / "points").glob("*/result.json")]
    assert kept == ["parallel-chunk512-c1-r1"], kept


def test_a_read_only_target_raises_a_one_line_run_write_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):  # root ignores the mode bits
        ro.chmod(0o700)
        pytest.skip("running as root: a 0500 directory is still writable")
    with pytest.raises(RunWriteError) as info:
        atomic_write_text(ro / "x.json", "{}")
    assert str(info.value).startswith(f"could not write {ro / 'x.json'}") and "\n" not in str(info.value)


def test_a_corrupt_sqlite_database_is_refused_before_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    db = ResultsDB(f"sqlite:///{path}")
    db.close()
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE filler (x TEXT)")
        conn.executemany("INSERT INTO filler VALUES (?)", [("y" * 500,)] * 200)
    data = bytearray(path.read_bytes())
    page = 4096
    data[page * 3 : page * 3 + 64] = b"\xff" * 64  # a malformed b-tree page header
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(CorruptDatabase, match=r"quick_check|cannot be read"):
        ResultsDB(f"sqlite:///{path}")
    assert path.read_bytes() == before, "the corrupt database was written to"
