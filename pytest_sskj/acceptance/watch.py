"""The bench phase of a point, watched: the bench runs in a worker thread while this thread polls the server.

:func:`run_watched` is the one entry point (the runner's phase 2): it starts the bench on a thread named
``sskj-bench-<point>``, redraws progress and calls ``check_alive`` every :data:`WATCH_INTERVAL_S`, and tells
a crash seen while watching, a crash behind the bench's own error and a failure of the bench client itself
apart.  The bench thread runs at :data:`CLIENT_NICE` where the OS allows it, and records the run's CPU
partition (:func:`~pytest_sskj.server.cpus.measured_fields`).  What the caller gets is one
:class:`WatchedBench`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_sskj.bench.result import BenchOutcome
from pytest_sskj.errors import ServerCrashed
from pytest_sskj.server.serving import Serving

__all__ = ["CLIENT_NICE", "WATCH_INTERVAL_S", "WatchedBench", "raise_client_priority", "run_watched"]

WATCH_INTERVAL_S = 0.25
"""How often the watching thread redraws progress and asks the server whether it is alive."""

CLIENT_NICE = -10
"""Niceness of the bench thread where the OS allows it (root / CAP_SYS_NICE): the client's timestamps must
not wait behind the shared box's other work (client-bound points); it uses a few % of one core."""

Crash = tuple[str, str]
"""(category, message) of a point that ended with its server: ``crash``, ``bench``."""


@dataclass
class WatchedBench:
    """What the watched bench phase produced."""

    result: BenchOutcome | None
    crash: Crash | None
    client_priority: str = ""
    cpus: dict[str, Any] = field(default_factory=dict)


def raise_client_priority() -> str:
    """Give the calling (bench) thread niceness :data:`CLIENT_NICE`; says what happened, never raises."""
    import os

    if not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return "unchanged (no per-thread priority on this OS)"
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        if before > CLIENT_NICE:
            os.setpriority(os.PRIO_PROCESS, tid, CLIENT_NICE)
        return f"nice {os.getpriority(os.PRIO_PROCESS, tid)} (was {before})"
    except OSError as exc:
        return f"unchanged ({exc.strerror or exc})"


def run_watched(
    *,
    name: str,
    server: Serving,
    bench: Callable[[], BenchOutcome],
    cpus: Callable[[], dict[str, Any]],
    crashed: Callable[[BaseException], str],
    on_crash: Callable[[str], None],
    draw: Callable[[], None],
) -> WatchedBench:
    """Run ``bench`` on a thread; poll ``server.check_alive`` here.

    ``crashed(exc)`` words a crash; ``on_crash(what)`` tears the server down (``crashed``, or ``hung`` when this
    thread is interrupted -- pytest-timeout's signal, Ctrl-C -- which is re-raised after it); ``draw`` redraws
    the progress line on this thread, where suspending capture is safe.
    """
    box: dict[str, Any] = {}

    def work() -> None:
        box["client_priority"] = raise_client_priority()
        box["cpus"] = cpus()
        try:
            box["result"] = bench()
        except BaseException as exc:  # reported on the watching thread
            box["error"] = exc

    thread = threading.Thread(target=work, name=f"sskj-bench-{name}", daemon=True)
    draw()
    thread.start()
    try:
        crash = _watch(thread, server, crashed, draw)
    except BaseException:
        # pytest-timeout (signal method) or Ctrl-C while the server hangs: cancel the in-flight requests first
        # (no server left "cleaning up" with requests open), then tear it down, mark it
        from pytest_sskj.interrupts import stop_thread

        stop_thread(thread)
        on_crash("hung")
        raise
    if crash is not None:
        on_crash("crashed")  # makes the in-flight requests fail fast
        thread.join(60.0)
    err = box.get("error")
    if err is not None and crash is None:
        crash = _bench_error(err, name, server, crashed)
    return WatchedBench(
        result=box.get("result"),
        crash=crash,
        client_priority=str(box.get("client_priority") or ""),
        cpus=dict(box.get("cpus") or {}),
    )


def _watch(
    thread: threading.Thread, server: Serving, crashed: Callable[[BaseException], str], draw: Callable[[], None]
) -> Crash | None:
    """Wait for the bench thread, redrawing and checking the server; a crash seen meanwhile ends the wait."""
    while thread.is_alive():
        thread.join(WATCH_INTERVAL_S)
        draw()
        if not thread.is_alive():
            break
        try:
            server.check_alive()
        except ServerCrashed as exc:
            return ("crash", crashed(exc))
    return None


def _bench_error(err: BaseException, name: str, server: Serving, crashed: Callable[[BaseException], str]) -> Crash:
    """The bench raised: the server's crash behind it, else a failure of the bench client itself."""
    if isinstance(err, ServerCrashed):
        return ("crash", crashed(err))
    try:
        server.check_alive()
    except ServerCrashed as exc:
        return ("crash", crashed(exc))
    return ("bench", f"the bench client failed during {name}: {type(err).__name__}: {err}")
