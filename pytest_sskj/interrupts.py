"""SIGTERM and SIGINT end a session the same, orderly way: as an interrupted run.

pytest turns SIGINT into ``KeyboardInterrupt`` (exit status 2, fixture teardown, session finish); SIGTERM
would kill the process on the spot, leaving ``manifest.json`` at ``running`` and the point in flight
without a row.  :func:`install` (controller, main thread, at session start) makes SIGTERM raise
:class:`Terminated`, a ``KeyboardInterrupt``, so it unwinds exactly like Ctrl-C: the point runner records
the interrupted point, the server pool tears every server down, and the manifest ends with
``status: interrupted``, the signal and the exit status.  The received signal's name is kept in
``config.stash[EXTRA_KEY]["signal"]``; :func:`restore` puts the previous handlers back.

Ending fast: the first signal runs every callback registered with :func:`on_interrupt` (the server pools
shorten their stop grace to :data:`INTERRUPT_GRACE_S`, so a server that hangs "cleaning up" with requests
still open is SIGKILLed within seconds, whole tree, instead of after the normal 15 s grace); a second SIGINT
(or SIGTERM) while that teardown runs ends the process at once (exit status 130): every finished point is
already on disk, and the reaper process (``server/process.py``) SIGKILLs the registered server trees once this
process is gone.

Where the seconds go, in order (issue 27; each step bounded): the point runner first stops the bench thread
(:func:`stop_thread`: its event loop cancels every in-flight request and closes the connections, so no server
is left "cleaning up" with requests open), then the pool stops every server at once with the short grace; the
traceback pytest prints for the interrupt is cut to its last frame (all it shows without ``--full-trace``),
which saves formatting the source of ~50 frames.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from pytest_sskj.stash import EXTRA_KEY

__all__ = [
    "BENCH_STOP_S",
    "INTERRUPT_GRACE_S",
    "Terminated",
    "install",
    "installed",
    "on_interrupt",
    "received",
    "restore",
    "stop_thread",
]

_PREVIOUS = "signal_handlers"
_CALLBACKS = "interrupt_callbacks"
_FINISH = "interrupt_finish"
_SHORT_TB = "sskj-interrupt-short-traceback"
INTERRUPT_GRACE_S = 1.0
"""Stop grace of every server once the session is interrupted (SIGTERM to the leader, half of it, then the
group, then SIGKILL): an interrupted run keeps what it measured and has nothing left to wait for."""


BENCH_STOP_S = 1.0
"""How long an interrupted point waits for its bench thread to cancel its in-flight requests (the event loop
cancels every task and closes every connection; a few ms when the loop is responsive)."""


def stop_thread(thread: threading.Thread, timeout_s: float = BENCH_STOP_S) -> bool:
    """Raise :class:`KeyboardInterrupt` in ``thread`` (a bench thread running ``asyncio.run``: the loop then
    cancels every task, so the in-flight requests are closed before their server is stopped) and wait up to
    ``timeout_s`` for it to end; whether it ended.  The exception lands at the thread's next bytecode, so a
    thread blocked in C (a ``select`` with nothing due) ends at its next wake-up (the bench's loop wakes every
    few ms: its saturation monitor's ticker); the wait is bounded either way.

    Whether the thread runs is asked of the interpreter (``sys._current_frames``), not ``thread.is_alive()``:
    a Ctrl-C that interrupts ``thread.join()`` in the main thread marks the joined thread stopped while it
    still runs (CPython 3.11, bpo-45274), which is exactly how an interrupted point gets here."""
    ident = thread.ident
    if ident is None or not _running(ident):
        return True
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(KeyboardInterrupt))
    deadline = time.perf_counter() + timeout_s
    while _running(ident):
        if time.perf_counter() >= deadline:
            return False
        time.sleep(0.005)
    return True


def _running(ident: int) -> bool:
    return ident in sys._current_frames()


class _ShortTraceback:
    """pytest formats the whole traceback of an interrupt (source of every frame, seconds on a loaded box) and
    then prints only its last line unless ``--full-trace``: cut it to the last frame first."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if not self.config.option.fulltrace and len(excinfo.traceback) > 1:
            excinfo.traceback = excinfo.traceback[-1:]


def on_interrupt(config: pytest.Config, callback: Callable[[], None]) -> None:
    """Run ``callback`` (fast, no I/O wait) when the session first receives SIGINT or SIGTERM."""
    config.stash[EXTRA_KEY].setdefault(_CALLBACKS, []).append(callback)


def _run_callbacks(extra: dict[str, Any]) -> None:
    for callback in list(extra.get(_CALLBACKS) or []):
        with contextlib.suppress(Exception):  # a callback must never turn the interrupt into another error
            callback()


def _exit_now(config: pytest.Config, signum: int) -> None:
    finish = config.stash[EXTRA_KEY].get(_FINISH)
    with contextlib.suppress(Exception):  # the manifest says interrupted, not running (a few ms)
        if finish is not None:
            finish(config, 2)
    os.write(
        2,
        f"\nsskj: second {signal.Signals(signum).name}: exiting now (finished points are kept; the "
        "reaper stops the servers)\n".encode(),
    )
    os._exit(130)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the session receives SIGTERM."""


def install(config: pytest.Config, finish: Callable[[pytest.Config, int], None] | None = None) -> None:
    """Handle SIGTERM and SIGINT for this session (a no-op off the main thread).

    ``finish``: what a second signal runs before the process exits at once (the entry layer passes
    :func:`pytest_sskj.plugin.finish_manifest`, so that the manifest says ``interrupted``); this module imports
    nothing above it."""
    if threading.current_thread() is not threading.main_thread():
        return
    extra = config.stash[EXTRA_KEY]
    if finish is not None:
        extra[_FINISH] = finish
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        first = "signal" not in extra
        if not first:
            _exit_now(config, signum)
        extra.setdefault("signal", signal.Signals(signum).name)
        _run_callbacks(extra)
        if signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)
        raise Terminated(f"received {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGINT):
        current = signal.getsignal(sig)
        if current in (signal.SIG_IGN, None):
            continue  # ignored on purpose (nohup, a background job): keep it so
        previous[sig] = current
        signal.signal(sig, on_signal)
    extra[_PREVIOUS] = previous
    if not config.pluginmanager.has_plugin(_SHORT_TB):
        config.pluginmanager.register(_ShortTraceback(config), _SHORT_TB)


def installed(config: pytest.Config) -> bool:
    """Whether this session's SIGTERM/SIGINT handlers (:func:`install`) are in place."""
    return _PREVIOUS in config.stash.get(EXTRA_KEY, {})


def restore(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in (config.stash[EXTRA_KEY].pop(_PREVIOUS, None) or {}).items():
        signal.signal(sig, handler)


def received(config: pytest.Config) -> str | None:
    """The name of the signal that interrupted this session (``SIGTERM``, ``SIGINT``), else ``None``."""
    value = config.stash.get(EXTRA_KEY, {}).get("signal")
    return str(value) if value else None
