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
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from pytest_sskj.stash import EXTRA_KEY

__all__ = ["INTERRUPT_GRACE_S", "Terminated", "install", "on_interrupt", "received", "restore"]

_PREVIOUS = "signal_handlers"
_CALLBACKS = "interrupt_callbacks"
_FINISH = "interrupt_finish"
INTERRUPT_GRACE_S = 1.0
"""Stop grace of every server once the session is interrupted (SIGTERM to the leader, half of it, then the
group, then SIGKILL): an interrupted run keeps what it measured and has nothing left to wait for."""


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


def restore(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in (config.stash[EXTRA_KEY].pop(_PREVIOUS, None) or {}).items():
        signal.signal(sig, handler)


def received(config: pytest.Config) -> str | None:
    """The name of the signal that interrupted this session (``SIGTERM``, ``SIGINT``), else ``None``."""
    value = config.stash.get(EXTRA_KEY, {}).get("signal")
    return str(value) if value else None
