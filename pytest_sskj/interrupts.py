"""SIGTERM and SIGINT end a session the same, orderly way: as an interrupted run.

pytest turns SIGINT into ``KeyboardInterrupt`` (exit status 2, fixture teardown, session finish); SIGTERM
would kill the process on the spot, leaving ``manifest.json`` at ``running`` and the point in flight
without a row.  :func:`install` (controller, main thread, at session start) makes SIGTERM raise
:class:`Terminated`, a ``KeyboardInterrupt``, so it unwinds exactly like Ctrl-C: the point runner records
the interrupted point, the server pool tears every server down, and the manifest ends with
``status: interrupted``, the signal and the exit status.  The received signal's name is kept in
``config.stash[EXTRA_KEY]["signal"]``; :func:`restore` puts the previous handlers back.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytest

from pytest_sskj.stash import EXTRA_KEY

__all__ = ["Terminated", "install", "received", "restore"]

_PREVIOUS = "signal_handlers"


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the session receives SIGTERM."""


def install(config: pytest.Config) -> None:
    """Handle SIGTERM and SIGINT for this session (a no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    extra = config.stash[EXTRA_KEY]
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        first = "signal" not in extra
        extra.setdefault("signal", signal.Signals(signum).name)
        if signum == signal.SIGINT:
            signal.default_int_handler(signum, frame)
        if first:  # a second SIGTERM while tearing down is not raised again
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
