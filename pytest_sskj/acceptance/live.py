"""The live terminal line of a running point: ``serial chunk512 C=8 r2/3: 17/40 requests``.

Long runs stay understandable: while a point runs, one status line below the test's own line is
rewritten in place as requests finish, and erased when the point ends so pytest's verdict lands where
it always does.  The line is only drawn on an interactive terminal (a tty), never under ``-q``, never on
an xdist worker (whose output nobody sees), and never when the terminal reporter is absent.  It is drawn
from the main thread with pytest's output capturing suspended, like pytest's own live logging.

Off a terminal (a CI log, ``| tee``) the line cannot be rewritten, so :class:`LiveLine` writes a plain progress
line instead, at least every :data:`LOG_INTERVAL_S` seconds while a point runs: point, repeat, requests done,
the point's elapsed time and ETA (from its request rate so far), and the session's elapsed time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import pytest

from pytest_sskj.acceptance.matrix import Point

__all__ = ["LOG_INTERVAL_S", "LiveLine", "live_enabled", "log_enabled", "log_text", "status_text"]

_MIN_INTERVAL_S = 0.1
LOG_INTERVAL_S = 10.0
"""Off a tty: the longest silence between two progress lines while points run."""


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


def log_enabled(config: pytest.Config) -> bool:
    """Whether plain progress lines are written: no tty, the controller, not ``-q``, a terminal reporter."""
    if hasattr(config, "workerinput") or config.get_verbosity() < 0:
        return False
    tr = config.pluginmanager.get_plugin("terminalreporter")
    return tr is not None and not bool(getattr(tr, "isatty", False))


def _dur(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s} s"


def log_text(point: Point, done: int, total: int, elapsed_s: float, session_s: float) -> str:
    """The plain progress line: ``sskj: progress parallel chunk512 C=16 r2/3: 17/40 requests, 6 s, ETA 8 s``."""
    eta = _dur(elapsed_s * (total - done) / done) if done > 0 else "unknown"
    body = status_text(point, done, total).removeprefix("sskj: ")
    return f"sskj: progress {body}, {_dur(elapsed_s)} elapsed, ETA {eta} (session {_dur(session_s)})"


class LiveLine:
    """Draws the status line through a writer (the terminal reporter's), throttled to 10 updates/s."""

    def __init__(
        self,
        writer: _Writer | None,
        suspend: Callable[[], AbstractContextManager[Any]] | None = None,
        *,
        log: bool = False,
        interval_s: float = LOG_INTERVAL_S,
    ) -> None:
        self.writer = writer
        self.log = log
        """Off a tty: plain lines every ``interval_s`` instead of one rewritten line."""
        self.interval_s = interval_s
        self._started = time.monotonic()
        self._printed = self._started
        self._point: tuple[str, float] | None = None
        self.suspend = suspend or contextlib.nullcontext
        self._active = False
        self._last = 0.0
        self._width = 0
        self._col = 0
        self._saved_line: str | None = None

    @classmethod
    def for_config(cls, config: pytest.Config) -> LiveLine:
        log = log_enabled(config)
        if not live_enabled(config) and not log:
            return cls(None)
        tr: Any = config.pluginmanager.get_plugin("terminalreporter")
        capman: Any = config.pluginmanager.get_plugin("capturemanager")
        # output capturing is active during a test's call: draw with it suspended, as pytest's live logging does
        suspend = capman.global_and_fixture_disabled if capman is not None else None
        return cls(tr._tw if tr is not None else None, suspend, log=log)

    def _log(self, point: Point, done: int, total: int) -> None:
        now = time.monotonic()
        if self._point is None or self._point[0] != point.id:
            self._point = (point.id, now)
        if now - self._printed < self.interval_s:
            return
        self._printed = now
        assert self.writer is not None
        text = log_text(point, done, total, now - self._point[1], now - self._started)
        with self.suspend():
            self.writer.write(f"\n{text}\n", flush=True)

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def update(self, point: Point, done: int, total: int) -> None:
        if self.writer is None:
            return
        if self.log:
            self._log(point, done, total)
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
        if self.writer is None or not self._active or self.log:
            return
        right = f"\x1b[{self._col}C" if self._col else ""
        with self.suspend():
            self.writer.write(f"\r\x1b[2K\x1b[1A{right}", flush=True)
        if self._saved_line is not None and hasattr(self.writer, "_current_line"):
            # the terminal writer measures the current line for pytest's right-aligned progress column
            setattr(self.writer, "_current_line", self._saved_line)  # noqa: B010
        self._active = False
        self._width = 0
