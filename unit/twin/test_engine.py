"""The twin's serving engine keeps the modelled GPU's own clock (``pytest_sskj/twin/engine.py``).

A stand-in rank shares this box's cores with everything else CI runs; when its process is descheduled for a
while, the modelled GPU must not lose that time while work is queued (CI once saw one repeat of the users' 4K/C16
arm 12 % slow beside the slow phase, and the A/B came out inconclusive), and it must never serve a request before
it arrived.  A descheduled rank is held here by holding the engine's lock: neither its step thread nor a
request's submission runs meanwhile, as in a stopped process.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from pytest_sskj.twin.engine import Request, ServingEngine
from pytest_sskj.twin.model import load_model
from pytest_sskj.twin.plugin import DATA

MODEL = load_model(Path(DATA) / "kimi3-pro6000.toml")
PROMPT = list(range(16384))


def _engine(chunk: int = 4096, concurrency: int = 8) -> ServingEngine:
    cells = [c for c in MODEL.cells if c.backend == "marlin" and c.chunk == chunk and c.concurrency == concurrency]
    assert cells, f"the shipped model has no marlin cell at chunk {chunk} C={concurrency}"
    engine = ServingEngine(MODEL, cells, chunk=chunk, role="serve", label="marlin-test")
    engine.new_repeat()
    return engine


def _wait(reqs: list[Request], timeout_s: float = 30.0) -> None:
    deadline = time.perf_counter() + timeout_s
    for req in reqs:
        while True:
            _, done = req.events.get(timeout=max(0.01, deadline - time.perf_counter()))
            if done:
                break


def _first_tokens(stall_s: float, *, after_s: float = 0.15) -> list[float]:
    """Eight 16K requests queued at once; the rank descheduled ``stall_s`` from ``after_s`` on; first-token times
    relative to the first one's."""
    engine = _engine()
    try:
        reqs = [engine.submit(PROMPT, 1) for _ in range(8)]
        if stall_s:
            time.sleep(after_s)
            with engine._lock:  # the rank's process is descheduled: nothing in it runs
                time.sleep(stall_s)
        _wait(reqs)
    finally:
        engine.stop()
    times = [r.first_token_at for r in reqs if r.first_token_at is not None]
    assert len(times) == len(reqs), "every request should have had its first token"
    return [t - times[0] for t in times]


def test_a_descheduled_rank_loses_no_modelled_time_while_work_is_queued() -> None:
    calm = _first_tokens(0.0)
    stalled = _first_tokens(0.4)
    gaps = [round(b - a, 4) for a, b in zip(calm, stalled, strict=True)]
    # a lost 0.4 s would show as a jump of ~0.4 s from the request in prefill at the stall on
    assert max(abs(g) for g in gaps) < 0.005, (
        f"expected the same first-token schedule with a 0.4 s stall as without one; differences (s): {gaps}"
    )


def test_a_request_is_never_served_before_it_arrived_nor_faster_than_its_own_work() -> None:
    """A closed loop at C=8 with a 0.3 s stall in the middle: every request's first token comes at least its own
    prefill work after its arrival (the catch-up after a stall starts no step before its requests arrived)."""
    engine = _engine()
    done: list[Request] = []
    left = [24]
    lock = threading.Lock()

    def client() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            req = engine.submit(PROMPT, 1)
            _wait([req])
            with lock:
                done.append(req)

    threads = [threading.Thread(target=client) for _ in range(8)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.3)
        with engine._lock:
            time.sleep(0.3)
        for t in threads:
            t.join(timeout=60)
    finally:
        engine.stop()
    rate, _, _ = engine.curve(16384).at(8)
    short = []
    for req in done:
        assert req.first_token_at is not None
        work = len(req.prompt) * (req.mult or 0.0) / (rate * engine._factor) * engine.scale
        if req.first_token_at - req.arrival < work * (1 - 1e-9):
            short.append((round(req.first_token_at - req.arrival, 4), round(work, 4)))
    assert len(done) == 24, f"expected 24 requests served, saw {len(done)}"
    assert not short, f"requests served faster than their own prefill work (seen s, work s): {short}"


@pytest.mark.parametrize("chunk", [4096, 16384])
def test_with_no_stall_a_burst_is_served_back_to_back_from_its_first_arrival(chunk: int) -> None:
    """Eight requests at once on an idle engine: the first step starts at the first arrival plus the calibrated
    wake-up, and no step waits for anything after it (the schedule is the queue's total work)."""
    engine = _engine(chunk)
    try:
        reqs = [engine.submit(PROMPT, 1) for _ in range(8)]
        _wait(reqs)
    finally:
        engine.stop()
    rate, _, params = engine.curve(16384).at(8)
    work = sum(len(r.prompt) * (r.mult or 0.0) for r in reqs) / (rate * engine._factor) * engine.scale
    last = max(r.first_token_at or 0.0 for r in reqs)
    expected = reqs[0].arrival + params.wake_s * engine.scale + work
    assert abs(last - expected) < 0.002, f"expected the last first token at {expected:.4f}, saw {last:.4f}"


def test_a_stream_writer_that_fell_behind_sends_the_newest_state_once_as_sglang_does() -> None:
    """SGLang's tokenizer manager drains every queued output of a request and sends the last (cumulative) one; the
    twin's /generate writer does the same, so a writer descheduled on a loaded box catches up in one frame instead
    of replaying a backlog frame by frame (which made a PD job's TPOT 16 % long on a loaded CI box)."""
    from pytest_sskj.twin.api import _latest

    req = Request(PROMPT[:8], 5)
    for n in (1, 2, 3):
        req.events.put((n, False))
    assert _latest(req) == (3, False), "three queued states: the newest is sent"
    assert req.events.empty(), "the states behind it are drained"
    req.events.put((4, False))
    req.events.put((5, True))
    assert _latest(req) == (5, True), "the final state ends the stream"
    req.events.put((1, False))
    assert _latest(req) == (1, False), "a writer that keeps up sends every state"
