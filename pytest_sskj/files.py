"""Reading the files a user names, or a run left behind, without hanging or crashing on what is not a file.

Every file the tool reads whole (``release.toml``, a run's ``outcomes.json`` / ``manifest.json``, a release mark, a
deployment's state file, ...) goes through :func:`read_text_file`: it is opened only when it is a *regular* file --
a FIFO, device, socket or directory is refused without being opened (a FIFO would block the reader forever), a
symlink is followed and its target judged the same way, a symlink loop is refused -- and only up to a size bound
(``limit`` bytes; a file above it is refused naming its size).  The check is made again on the opened descriptor
(``O_NONBLOCK``, then ``fstat``), so a file swapped for a FIFO in between is refused too.  Text must be UTF-8;
a bad byte is refused naming its offset.  Every refusal is a :class:`FileRefused` (a ``ValueError``) whose message
is one line: the path, what it is, what is accepted.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_LIMIT", "FileRefused", "file_kind", "folder_problem", "read_json_file", "read_text_file"]

DEFAULT_LIMIT = 64 * 1024 * 1024
"""The default size bound of a file read whole (64 MiB: a run's largest file, ``results.jsonl`` of a long job with
its per-request samples, stays well below it)."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class FileRefused(ValueError):
    """A file that is not read: not a regular file, too large, not UTF-8 or not valid JSON (one line, the path)."""


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words (``a FIFO (named pipe)``); ``a regular file`` for one."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def _stat(path: Path, what: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileRefused(f"{what} {path} is a symlink loop; name a regular file") from None
        raise FileRefused(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


def _check(path: Path, st: os.stat_result, what: str, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(f"{what} {path} is {file_kind(st.st_mode)}, not a regular file; name a regular file")
    if st.st_size > limit:
        raise FileRefused(f"{what} {path} is {st.st_size} bytes, above the {limit}-byte bound of a file read whole")


def read_text_file(path: Path | str, *, what: str = "file", limit: int = DEFAULT_LIMIT, errors: str = "strict") -> str:
    """The UTF-8 text of ``path`` when it is a regular file of at most ``limit`` bytes.

    ``FileNotFoundError`` when it does not exist (callers say what that means); :class:`FileRefused` for anything
    else that stops the read; ``what`` names the file in the message (``release config``).  ``errors="replace"``
    reads what a crash may have cut mid-character (a run's own journals) instead of refusing it."""
    p = Path(path)
    _check(p, _stat(p, what), what, limit)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileRefused(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        _check(p, os.fstat(fh.fileno()), what, limit)
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"{what} {p} grew above the {limit}-byte bound of a file read whole while it was read")
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise FileRefused(
            f"{what} {p} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None


def read_json_file(path: Path | str, *, what: str = "file", limit: int = DEFAULT_LIMIT) -> Any:
    """:func:`read_text_file`, parsed as JSON; invalid JSON is a :class:`FileRefused` naming where it broke."""
    text = read_text_file(path, what=what, limit=limit)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileRefused(
            f"{what} {path} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None


def folder_problem(d: Path) -> tuple[str, str] | None:
    """Why ``d`` cannot be a folder this user writes into (created when missing), or ``None`` when it can: the
    kind (``file``: ``d`` or its nearest existing ancestor is no folder; ``unwritable``) and the words, which
    follow the folder's name: ``is a file``, ``lies below X, which is a file``, ``X is not writable by this user``."""
    for p in (d, *d.parents):
        if p.exists():
            if not p.is_dir():
                return "file", "is a file" if p == d else f"lies below {p}, which is a file"
            if not os.access(p, os.W_OK | os.X_OK):
                return "unwritable", f"{p} is not writable by this user"
            return None
    return None
