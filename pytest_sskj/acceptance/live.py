"""The live terminal line of a running point: ``serial chunk512 C=8 r2/3: 17/40 requests``.

Long runs stay understandable: while a point runs, one status line below the test's own line is
rewritten in place as requests finish, and erased when the point ends so pytest's verdict lands where
it always does.  The line is only drawn on an interactive terminal (a tty), never under ``-q``, never on
an xdist worker (whose output nobody sees), and never when the terminal reporter is absent.  It is drawn
from the main thread with pytest's output capturing suspended, like pytest's own live logging.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import pytest

from pytest_sskj.acceptance.matrix import Point

__all__ = ["LiveLine", "live_enabled", "status_text"]

_MIN_INTERVAL_S = 0.1


class _Writer(Protocol):
    def write(self, s: str, *, flush: bool = False) -> None: ...


def status_text(point: Point, done: int, total: int) -> str:
    """The status line of ``point`` after ``done`` of ``total`` requests."""
    what = "search step" if point.kind == "search" else f"r{point.repeat}/{point.repeats}"
    return f"sskj: {point.backend} chunk{point.chunk} C={point.concurrency} {what}: {done}/{total} requests"


def live_enabled(config: pytest.Config, *, isatty: bool | None = None) -> bool:
    """Whether a live line may be drawn for this session."""
    if hasattr(config, "workerinput"):
        return False
    if config.get_verbosity() < 0:
        return False
    if config.pluginmanager.get_plugin("terminalreporter") is None:
        return False
    if isatty is None:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        isatty = bool(getattr(tr, "isatty", False))
    return bool(isatty)


class LiveLine:
    """Draws the status line through a writer (the terminal reporter's), throttled to 10 updates/s."""

    def __init__(
        self, writer: _Writer | None, suspend: Callable[[], AbstractContextManager[Any]] | None = None
    ) -> None:
        self.writer = writer
        self.suspend = suspend or contextlib.nullcontext
        self._active = False
        self._last = 0.0
        self._width = 0
        self._col = 0
        self._saved_line: str | None = None

    @classmethod
    def for_config(cls, config: pytest.Config) -> LiveLine:
        if not live_enabled(config):
            return cls(None)
        tr: Any = config.pluginmanager.get_plugin("terminalreporter")
        capman: Any = config.pluginmanager.get_plugin("capturemanager")
        # output capturing is active during a test's call: draw with it suspended, as pytest's live logging does
        suspend = capman.global_and_fixture_disabled if capman is not None else None
        return cls(tr._tw if tr is not None else None, suspend)

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def update(self, point: Point, done: int, total: int) -> None:
        if self.writer is None:
            return
        now = time.monotonic()
        if self._active and done < total and now - self._last < _MIN_INTERVAL_S:
            return
        self._last = now
        text = status_text(point, done, total)
        if not self._active:
            self._col = int(getattr(self.writer, "width_of_current_line", 0) or 0)
            self._saved_line = getattr(self.writer, "_current_line", None)
        prefix = "\r" if self._active else "\n"
        pad = " " * max(0, self._width - len(text))
        with self.suspend():
            self.writer.write(f"{prefix}{text}{pad}", flush=True)
        self._width = len(text)
        self._active = True

    def finish(self) -> None:
        """Erase the line and return the cursor to the end of the test's own line."""
        if self.writer is None or not self._active:
            return
        right = f"\x1b[{self._col}C" if self._col else ""
        with self.suspend():
            self.writer.write(f"\r\x1b[2K\x1b[1A{right}", flush=True)
        if self._saved_line is not None and hasattr(self.writer, "_current_line"):
            # the terminal writer measures the current line for pytest's right-aligned progress column
            setattr(self.writer, "_current_line", self._saved_line)  # noqa: B010
        self._active = False
        self._width = 0
