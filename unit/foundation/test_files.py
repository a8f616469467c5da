"""Files read whole are opened only when they are regular files, within a size bound, as UTF-8 (issue 53, item 2):
a FIFO, a directory, a device, a symlink loop, a huge file and bad bytes are refused in one line, never hung on."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sskj.files import FileRefused, read_json_file, read_text_file


def bounded(fn: Callable[..., object], *args: object, limit_s: float = 5.0, **kw: object) -> object:
    """``fn(*args, **kw)`` in a thread for at most ``limit_s``: its result, or the exception it raised; a call that
    blocks (a reader on a FIFO) fails the test instead of hanging it.  unit/report/test_release_files.py uses it too."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn(*args, **kw))
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)}{args} did not return within {limit_s} s (it blocked)"
    return out[0]


def test_a_regular_file_and_a_symlink_to_one_are_read(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_text('{"ok": "é"}', encoding="utf-8")
    (tmp_path / "link.json").symlink_to(f)
    assert read_json_file(tmp_path / "link.json") == {"ok": "é"}
    assert read_text_file(f) == '{"ok": "é"}'


def test_a_missing_file_is_file_not_found_for_the_caller_to_word(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "none")


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "symlink-loop"])
def test_what_is_not_a_regular_file_is_refused_without_being_opened(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x"
    expected = {
        "fifo": "is a FIFO (named pipe), not a regular file; name a regular file",
        "directory": "is a directory, not a regular file; name a regular file",
        "device": "is a character device, not a regular file; name a regular file",
        "symlink-loop": "is a symlink loop; name a regular file",
    }[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":
        path = Path("/dev/null")
    else:
        path.symlink_to(tmp_path / "y")
        (tmp_path / "y").symlink_to(path)
    got = bounded(read_text_file, path, what="release config")
    assert isinstance(got, FileRefused), f"expected a refusal, got {got!r}"
    assert str(got) == f"release config {path} {expected}", str(got)


def test_a_file_above_the_bound_and_bad_bytes_and_bad_json_are_refused_naming_why(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2049)
    with pytest.raises(FileRefused, match=r"is 2049 bytes, above the 2048-byte bound of a file read whole"):
        read_text_file(big, limit=2048)
    bad = tmp_path / "bad"
    bad.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(FileRefused, match=r"is not UTF-8 text \(byte 0xff at offset 7\); save it as UTF-8"):
        read_text_file(bad)
    broken = tmp_path / "broken.json"
    broken.write_text('{"a": ')
    with pytest.raises(FileRefused, match=r"is not valid JSON \(Expecting value at line 1 column 7\)"):
        read_json_file(broken, what="outcomes")


def test_the_readers_of_profiles_twin_models_and_resume_refuse_a_fifo_at_once(tmp_path: Path) -> None:
    """The same rule at the readers the options reach: ``--profile``, ``--sskj-twin-model``, ``--resume``."""
    from pytest_sskj.acceptance.resume import MEASUREMENT_FILE
    from pytest_sskj.errors import ValueProblem
    from pytest_sskj.profile import find_profile, load_profile
    from pytest_sskj.twin.model import ModelError, load_model

    fifo = tmp_path / "p.toml"
    os.mkfifo(fifo)
    got = bounded(find_profile, str(fifo))
    assert isinstance(got, ValueProblem) and f"profile {str(fifo)!r} is a FIFO (named pipe)" in str(got), got
    got = bounded(load_profile, fifo, ())
    assert isinstance(got, ValueError) and f"profile {fifo} is a FIFO (named pipe)" in str(got), got
    got = bounded(load_model, fifo)
    assert isinstance(got, ModelError) and f"twin model {fifo} is a FIFO (named pipe)" in str(got), got
    run = tmp_path / "run"
    run.mkdir()
    os.mkfifo(run / MEASUREMENT_FILE)
    os.mkfifo(run / "manifest.json")
    from types import SimpleNamespace

    from pytest_sskj.acceptance.resume import guard_resume

    settings = SimpleNamespace(reports_dir=tmp_path, resume="run")
    got = bounded(guard_resume, settings)
    assert got == [
        f"{run} records neither {MEASUREMENT_FILE} nor manifest settings: cannot prove it measured the same"
    ], got
