"""An interrupted point stops its bench thread before its server (issue 27): :func:`stop_thread` raises
``KeyboardInterrupt`` in a thread running ``asyncio.run``, whose loop then cancels every in-flight request
(each task's cleanup runs: the connection is closed) and the thread ends.  The exception lands when the loop
next wakes; the bench's loop wakes every few ms (its saturation monitor's ticker), as the one here does."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from types import FrameType

import pytest

from pytest_sskj.interrupts import stop_thread


def test_stop_thread_cancels_every_task_of_the_threads_event_loop_and_ends_it() -> None:
    started, closed = threading.Event(), []

    async def request(i: int) -> None:
        try:
            started.set()
            await asyncio.sleep(600)  # an open request the server would answer in ten minutes
        finally:
            closed.append(i)  # where a stream closes its connection

    async def ticker() -> None:  # the bench's loop wakes every few ms (its saturation monitor, hang watchdog)
        for _ in range(120_000):  # ten minutes of 5 ms ticks
            await asyncio.sleep(0.005)

    async def bench() -> None:
        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(request(i) for i in range(8)))
        tick.cancel()

    box: dict[str, BaseException] = {}

    def work() -> None:
        try:
            asyncio.run(bench())
        except BaseException as exc:  # as the point runner's bench thread keeps it
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    assert started.wait(30), "the bench never started"
    assert stop_thread(thread, timeout_s=30), "the bench thread did not end after stop_thread"
    assert sorted(closed) == list(range(8)), f"every in-flight request closed, saw {sorted(closed)}"
    assert isinstance(box.get("error"), KeyboardInterrupt), box


def test_stop_thread_on_a_finished_thread_is_a_no_op() -> None:
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    assert stop_thread(thread, timeout_s=0.1)


def test_stop_thread_stops_a_thread_that_an_interrupted_join_marked_stopped() -> None:
    """Ctrl-C in ``thread.join()`` marks a running thread stopped (CPython 3.11, bpo-45274): the point runner
    meets its bench thread so, and ``stop_thread`` must still stop it."""
    started, ended = threading.Event(), threading.Event()

    async def bench() -> None:
        started.set()
        for _ in range(120_000):
            await asyncio.sleep(0.005)

    def work() -> None:
        try:
            asyncio.run(bench())
        except BaseException:
            ended.set()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    assert started.wait(30)
    previous = signal.signal(signal.SIGALRM, _interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with contextlib.suppress(_Interrupt):  # Ctrl-C while the main thread joins the bench thread
            thread.join(30)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if thread.is_alive():
        pytest.skip("this Python keeps an interrupted join's thread alive (bpo-45274 fixed): nothing to work around")
    assert stop_thread(thread, timeout_s=30) and ended.is_set(), "the still-running bench thread was not stopped"


class _Interrupt(Exception):
    pass


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise _Interrupt
