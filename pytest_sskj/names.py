"""Identifiers that become file and folder names, and the paths they name (issue 53).

One rule serves every identifier a user or a file gives that ends up in a path: run ids (``--run-id``,
``--run``), release tags (``release mark --tag``, ``release show``), deployment names (``serve``), profile names
and the backend names that point ids are built from.  A name is 1-:data:`MAX_NAME` characters of :data:`RULE`:
letters, digits and ``_ . + -``, starting with a letter, a digit or ``_`` (so never ``.``, ``..``, a hidden file,
an option, an absolute path or a path with a separator).  :func:`inside` joins a checked name to its root (the
reports dir, the releases dir, the deployments dir) and refuses the result when, after every symlink is followed,
it lies outside that root.  Both raise :class:`NameRefused` (a ``ValueError``) with one line saying what was
given, what is accepted and why.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["MAX_NAME", "RULE", "NameRefused", "check_name", "inside"]

MAX_NAME = 128
"""The longest name: a run id or tag plus a suffix such as ``.json`` stays far below a file name's 255 bytes."""

RULE = f"1-{MAX_NAME} characters of letters, digits, '_', '.', '+', '-', starting with a letter, digit or '_'"
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*", re.ASCII)


class NameRefused(ValueError):
    """A name that may not name a file or folder, or a path that would leave its root; the message is one line."""


def check_name(text: object, what: str = "name") -> str:
    """``text`` when it is a name by :data:`RULE`; :class:`NameRefused` naming ``what`` otherwise."""
    if not isinstance(text, str):
        raise NameRefused(f"{what} {text!r} is not text; accepted: {RULE}")
    if not text:
        raise NameRefused(f"{what} is empty; accepted: {RULE}")
    if len(text) > MAX_NAME:
        raise NameRefused(f"{what} {text[:40]!r}... is {len(text)} characters long; accepted: {RULE}")
    if text.startswith("-"):
        raise NameRefused(f"{what} {text!r} starts with '-' and would read as an option; accepted: {RULE}")
    if not _NAME_RE.fullmatch(text):
        bad = sorted({c for c in text if not (c.isascii() and (c.isalnum() or c in "_.+-"))})
        why = f"it holds {''.join(bad)!r}" if bad else "it starts with '.' or '+'"
        raise NameRefused(f"{what} {text!r} is not accepted ({why}): {RULE}; it names a file or folder")
    return text


def inside(root: Path, name: str, suffix: str = "", what: str = "name") -> Path:
    """``root / (name + suffix)`` for a :func:`check_name` name, refused when its real path (symlinks followed, as
    far as they exist) is not below ``root``'s real path."""
    check_name(name, what)
    path = root / f"{name}{suffix}"
    try:
        base = root.resolve()
        real = path.resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError before Python 3.13), an unreadable link
        raise NameRefused(f"{what} {name!r}: {path} cannot be resolved ({e}); accepted: a name below {root}") from e
    if real == base or not real.is_relative_to(base):
        raise NameRefused(f"{what} {name!r} leads outside {root}: {path} links to {real}; accepted: a name below it")
    return path
