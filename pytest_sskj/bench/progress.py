"""Live progress of long benchmark runs: a throttled ``(done, total)`` callback with point and repeat context.

The runner calls ``progress(done, total)`` as each measured request finishes.  :class:`ProgressReporter`
turns that into a :class:`ProgressLine` (point label, repeat r/R, requests k/N) and hands it to a sink at
most every ``interval_s`` seconds, plus always the last one.  The terminal line itself is drawn by the
acceptance layer (it owns the terminal); :func:`terminal_sink` is a ready-made sink over pytest's
terminal reporter for tests that want one, and :func:`progress_for` returns None on xdist workers, so
workers stay quiet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter

import pytest

__all__ = ["ProgressLine", "ProgressReporter", "progress_for", "terminal_sink"]


@dataclass(frozen=True)
class ProgressLine:
    """One progress update of one point."""

    point: str
    repeat: int
    """0-based repeat index."""
    repeats: int
    done: int
    total: int

    def render(self) -> str:
        """E.g. ``isl512-osl16-c8 repeat 2/3: 17/40 requests``."""
        return f"{self.point} repeat {self.repeat + 1}/{self.repeats}: {self.done}/{self.total} requests"


Sink = Callable[[ProgressLine], None]


class ProgressReporter:
    """A ``(done, total)`` callback for :func:`pytest_sskj.bench.run_bench` that throttles updates."""

    def __init__(self, sink: Sink, point: str, *, repeat: int = 0, repeats: int = 1, interval_s: float = 0.5) -> None:
        self.sink = sink
        self.point = point
        self.repeat = repeat
        self.repeats = repeats
        self.interval_s = interval_s
        self._last = float("-inf")

    def __call__(self, done: int, total: int) -> None:
        now = perf_counter()
        if done < total and now - self._last < self.interval_s:
            return
        self._last = now
        self.sink(ProgressLine(self.point, self.repeat, self.repeats, done, total))

    def for_repeat(self, repeat: int) -> ProgressReporter:
        """The same reporter for another repeat."""
        return ProgressReporter(self.sink, self.point, repeat=repeat, repeats=self.repeats, interval_s=self.interval_s)


def terminal_sink(config: pytest.Config) -> Sink | None:
    """A sink that rewrites one terminal line; None when there is no terminal reporter."""
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return None

    def sink(line: ProgressLine) -> None:
        text = f"sskj: {line.render()}"
        if line.done >= line.total:
            tr.rewrite(text, erase=True)
            tr.write_line("")
        else:
            tr.rewrite(text, erase=True)

    return sink


def progress_for(
    config: pytest.Config, point: str, *, repeat: int = 0, repeats: int = 1, sink: Sink | None = None
) -> ProgressReporter | None:
    """A reporter for ``point`` drawing through ``sink`` (default: the terminal); None on xdist workers."""
    if hasattr(config, "workerinput"):
        return None
    sink = sink or terminal_sink(config)
    if sink is None:
        return None
    return ProgressReporter(sink, point, repeat=repeat, repeats=repeats)
