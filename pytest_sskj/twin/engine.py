"""The twin's serving model: a paced prefill engine and per-request decode timelines.

:class:`ServingEngine` is what a stand-in rank 0 runs.  Requests join a FIFO prefill queue; one engine
thread cuts it into chunk-sized steps (``--chunked-prefill-size`` tokens of the head request) and sleeps each
step for ``tokens * multiplier / rate`` modelled seconds, the rate that of the load level (the most requests
in the system since it was last empty: a closed loop's concurrency, its draining tail included) -- so TTFT
grows with the concurrency while throughput saturates, as on the users' cluster.  A request's first token
is emitted at the end of its last prefill chunk; its further tokens follow on its own decode timeline (one
step of the cell's TPOT each, log-normally spread per request).  Every duration is multiplied by the
model's ``time_scale``.  The modelled GPU keeps its own clock: a step starts when the previous one ended or
when its request arrived, never when the engine thread happens to wake, so a rank descheduled by its host
loses no modelled time while work is queued (a late wake-up is caught up in full), and no step starts
before its request arrived.  One draw of between-repeat noise per repeat (each ``/flush_cache`` starts
one) scales the rate, seeded by the model's seed, the server's cell and the repeat, so a run is
reproducible.  The parameters come from :func:`pytest_sskj.twin.model.calibrate`, whose closed-loop
simulation this engine follows step for step (docs/twin.md).

PD: a ``prefill`` engine records when each bootstrap room's KV is ready (:meth:`wait_kv`); a ``decode``
engine starts a request's decode only after its room's KV arrived (the caller waits on the prefill side).

Stdlib only (runs on the nodes).
"""

from __future__ import annotations

import heapq
import itertools
import math
import queue
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from pytest_sskj.twin.model import (
    Cell,
    EngineParams,
    TwinModel,
    calibrate,
    lognormal_quantiles,
    tpot_quantiles,
    uncalibrated,
)
from pytest_sskj.twin.speculative import Draft

__all__ = ["Request", "ServingEngine", "token_ids"]

_VOCAB = 32000


def token_ids(prompt: Sequence[int], n: int) -> list[int]:
    """The greedy output of the stand-in model: a deterministic function of the prompt (every backend agrees)."""
    h = 1469598103934665603
    for t in prompt[:256]:
        h = ((h ^ int(t)) * 1099511628211) & 0xFFFFFFFFFFFF
    h ^= len(prompt)
    return [(h + 7919 * (k + 1) * (k + 3)) % _VOCAB + 1 for k in range(n)]


@dataclass
class Request:
    """One request inside the engine; the HTTP handler reads ``events`` (tokens emitted so far, done)."""

    prompt: list[int]
    max_new: int
    room: str | None = None
    arrival: float = 0.0
    remaining: int = 0
    mult: float | None = None
    """Prefill cost multiplier, drawn when the request's first step is cut (its position in the repeat)."""
    tpot_s: float = 0.0
    emitted: int = 0
    draws: random.Random | None = None
    """The draft's draw stream (a speculative server only)."""
    spec: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Speculative counts so far: verify steps, accepted draft tokens, proposed draft tokens (sglang's
    ``spec_verify_ct``, ``spec_num_correct_drafts``, ``spec_num_proposed_drafts``)."""
    first_token_at: float | None = None
    events: queue.Queue[tuple[int, bool]] = field(default_factory=queue.Queue)
    """``(tokens emitted so far, finished)`` after every emission."""

    @property
    def output_ids(self) -> list[int]:
        return token_ids(self.prompt, self.emitted)


@dataclass(frozen=True)
class _Curve:
    """The cells of one server at one ISL, by concurrency, with their calibrated parameters."""

    isl: int
    points: tuple[tuple[int, Cell, EngineParams], ...]

    def at(self, n: int) -> tuple[float, Cell, EngineParams]:
        """Prefill rate at load level ``n`` (the most requests in the system since it was last empty; linear
        between measured concurrencies, flat outside) and the nearest cell's parameters."""
        pts = self.points
        nearest = min(pts, key=lambda p: (abs(p[0] - n), p[0]))
        if n <= pts[0][0]:
            return pts[0][2].prefill_tps, nearest[1], nearest[2]
        if n >= pts[-1][0]:
            return pts[-1][2].prefill_tps, nearest[1], nearest[2]
        for (c0, _, p0), (c1, _, p1) in itertools.pairwise(pts):
            if c0 <= n <= c1:
                f = (n - c0) / (c1 - c0)
                return p0.prefill_tps + f * (p1.prefill_tps - p0.prefill_tps), nearest[1], nearest[2]
        raise AssertionError("unreachable")  # pragma: no cover


class ServingEngine:
    """The paced serving model of one stand-in server (see the module docstring)."""

    def __init__(
        self,
        model: TwinModel,
        cells: Sequence[Cell],
        *,
        chunk: int | None,
        role: str,
        label: str,
        calibrated: bool = True,
        draft: Draft | None = None,
    ) -> None:
        if not cells:
            raise ValueError("a serving engine needs at least one cell")
        fit = calibrate if calibrated else uncalibrated
        by_isl: dict[int, list[tuple[int, Cell, EngineParams]]] = {}
        for c in cells:
            by_isl.setdefault(c.isl, []).append((c.concurrency, c, fit(c, model.default_tpot_ms)))
        self.curves = tuple(_Curve(isl, tuple(sorted(v, key=lambda p: p[0]))) for isl, v in sorted(by_isl.items()))
        self._spreads = {
            c.key: (lognormal_quantiles(c.requests, p.service_cv), tpot_quantiles(c.requests, p.tpot_sigma))
            for v in by_isl.values()
            for _, c, p in v
        }
        """Per cell: a repeat's prefill multipliers and decode-step multipliers, by position (see :meth:`_draw`)."""
        self.scale = model.time_scale
        self.seed = model.seed
        self.draft = draft
        self._drafted = 0
        self.chunk = chunk if chunk and chunk > 0 else 8192
        self.role = role
        self.label = label
        self.epoch = 0
        self._factor = 1.0
        self._lock = threading.Condition()
        self._queue: list[Request] = []
        self._inflight = 0
        self._level = 0
        self._warmup = True  # the repeat's first busy period is still to end (a lone request there: the warmup)
        self._period_first = 0  # the slot the current busy period began at
        self._rooms: dict[str, float] = {}
        self._decode: list[tuple[float, int, Request]] = []
        self._decode_cv = threading.Condition()
        self._seq = 0
        self._index = 0
        self._stop = threading.Event()
        for target in (self._prefill_loop, self._decode_loop):
            threading.Thread(target=target, daemon=True, name=f"twin-{target.__name__}").start()

    # -- public ------------------------------------------------------------------------------------------
    def _seed_of(self, what: str, epoch: int) -> str:
        return f"{self.seed}|{self.label}|{what}|{epoch}"

    def new_repeat(self) -> None:
        """A cache flush: the next requests belong to a new repeat (a new draw of the between-repeat noise)."""
        with self._lock:
            self.epoch += 1
            sigma = self.curves[0].points[0][2].noise_sigma
            self._factor = max(0.5, random.Random(self._seed_of("repeat", self.epoch)).gauss(1.0, sigma))
            self._index = 0
            self._warmup = True

    def curve(self, isl: int) -> _Curve:
        return min(self.curves, key=lambda c: abs(math.log(max(1, isl) / c.isl)))

    def submit(self, prompt: list[int], max_new: int, room: str | None = None) -> Request:
        """Queue a request for prefill (``prefill``/``serve`` roles); its events tell the caller what to send."""
        req = Request(list(prompt), max(1, max_new), room=room, arrival=time.perf_counter(), remaining=len(prompt))
        with self._lock:
            self._admit()
            self._queue.append(req)
            self._lock.notify_all()
        return req

    def _admit(self) -> None:
        """One more request in the system (caller holds the lock): the load level, and where a busy period begins."""
        if self._inflight == 0:
            self._period_first = self._index
        self._inflight += 1
        self._level = max(self._level, self._inflight)

    def _period_ended(self) -> None:
        """The system emptied (caller holds the lock).  The repeat's first busy period, when it held one request
        alone, was the bench's warmup: its slot is given back, so the measured requests take the calibrated
        quantiles from the first (the same set a C=1 repeat without one takes, cyclically)."""
        if self._warmup and self._level == 1:
            self._index = self._period_first
        self._warmup = False
        self._level = 0

    def _draw(self, req: Request, cell: Cell, p: EngineParams) -> None:
        """The next request of the repeat (caller holds the lock): its prefill cost multiplier and decode step are
        the calibrated spreads' quantiles in the order :func:`~pytest_sskj.twin.model.calibrate` simulated (the
        cell's requests per repeat, cyclically: a request before the measured burst -- the bench's warmup --
        shifts no quantile out: :meth:`_period_ended`)."""
        k = self._index
        self._index += 1
        mults, steps = self._spreads[cell.key]
        req.mult = mults[k % len(mults)]
        req.tpot_s = p.tpot_s * steps[k % len(steps)]
        if self.draft is not None:
            req.draws = self.draft.stream(self._drafted)
            self._drafted += 1

    def submit_decode(self, prompt: list[int], max_new: int) -> Request:
        """A decode-role request whose KV has arrived: first token now, then its decode timeline."""
        req = Request(list(prompt), max(1, max_new), arrival=time.perf_counter(), remaining=0)
        with self._lock:
            self._admit()
            _, cell, p = self.curve(len(prompt)).at(self._level)
            self._draw(req, cell, p)
        self._first_token(req, time.perf_counter())
        return req

    def wait_kv(self, room: str, timeout_s: float) -> bool:
        """Block until the prefill of bootstrap room ``room`` finished (prefill role); ``False`` on timeout."""
        deadline = time.perf_counter() + timeout_s
        with self._lock:
            while room not in self._rooms:
                left = deadline - time.perf_counter()
                if left <= 0:
                    return False
                self._lock.wait(min(left, 1.0))
            return True

    @property
    def inflight(self) -> int:
        return self._inflight

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        with self._decode_cv:
            self._decode_cv.notify_all()

    # -- prefill -----------------------------------------------------------------------------------------
    def _take_step(self) -> tuple[Request, int, float]:
        """Cut the next step off the FIFO queue (caller holds the lock): the head request's next chunk -- a step
        never spans two requests, so requests finish one after another in FIFO order, as the calibration
        simulates them (the chunk's effect on throughput is its cells' own rate) -- its tokens and modelled
        seconds at the current load level's rate."""
        req = self._queue[0]
        rate, cell, p = self.curve(len(req.prompt)).at(self._level)
        if req.mult is None:
            self._draw(req, cell, p)
        assert req.mult is not None
        take = min(self.chunk, req.remaining)
        return req, take, take * req.mult / (rate * self._factor)

    def _gather(self, first: float) -> int:
        """Wait for the rest of a burst that woke the idle engine -- until no request arrived for 5 ms, at least
        10 ms and at most 100 ms after the first -- and return its load level: the wake-up is the level's (a
        burst of C requests takes C x a few ms to arrive, parsed, on a busy box)."""
        deadline = first + 0.1
        while True:
            with self._lock:
                last = max((r.arrival for r in self._queue), default=first)
                level = self._level
            until = min(deadline, max(first + 0.01, last + 0.005))
            if time.perf_counter() >= until:
                return level
            _sleep_until(until)

    def _prefill_loop(self) -> None:
        """The prefill steps on the modelled GPU's own clock (``busy_until``): a step starts when the previous one
        ended or when its request arrived, whichever is later, however late this thread wakes.  A stand-in rank
        descheduled by its host (CI's other jobs on the same cores) so loses no modelled time while work is
        queued.  Idle is read off the same clock: when the queue's first request arrived after the last step
        ended, the engine was idle and wakes up first (``wake_s``, after a short gather of the burst), whatever
        this thread saw -- the calibration's closed loop (:func:`~pytest_sskj.twin.model.simulate`) does the same.
        A burst that outgrew its gather (a client that paused mid-burst on a busy box) gets the wake-up of the level
        it reached, topped up before its first request finishes."""
        busy_until: float | None = None
        woke = (0, 0.0)  # the busy period's wake-up so far: (its level, its wake_s)
        ramp = False
        while not self._stop.is_set():
            with self._lock:
                while not self._queue and not self._stop.is_set():
                    self._lock.wait(0.5)
                if self._stop.is_set():
                    return
                first = min(r.arrival for r in self._queue)
            if busy_until is None or first >= busy_until:  # nothing was waiting when the last step ended
                level = self._gather(first)
                with self._lock:
                    _, _, p = self.curve(len(self._queue[0].prompt)).at(level)
                busy_until, woke, ramp = first + p.wake_s * self.scale, (level, p.wake_s), True
            with self._lock:
                if ramp and self._level > woke[0]:  # the burst outgrew the gather: its level's wake-up, topped up
                    _, _, p = self.curve(len(self._queue[0].prompt)).at(self._level)
                    busy_until += max(0.0, p.wake_s - woke[1]) * self.scale
                    woke = (self._level, max(p.wake_s, woke[1]))
                req, take, dur = self._take_step()
                start = max(busy_until, req.arrival)
            end = start + dur * self.scale
            _sleep_until(end)
            busy_until = end
            with self._lock:
                req.remaining -= take
                finished = req.remaining <= 0
                if finished:
                    ramp = False
                    self._queue.remove(req)
                    if req.room is not None:
                        self._rooms[req.room] = end
                self._lock.notify_all()
            if finished:
                self._first_token(req, end)

    # -- decode ------------------------------------------------------------------------------------------
    def _first_token(self, req: Request, t: float) -> None:
        req.first_token_at = t
        self._emit(req)
        if req.emitted < req.max_new and self.role != "prefill":
            self._schedule(req, t + self._step_s(req))

    def _step_s(self, req: Request) -> float:
        """The wall seconds of ``req``'s next decode step (a verify step with a draft)."""
        cost = self.draft.step_cost if self.draft is not None else 1.0
        return req.tpot_s * cost * self.scale / self._factor

    def _step_tokens(self, req: Request) -> int:
        """Tokens one decode step emits: 1, or with a draft the accepted draft tokens plus the target's own."""
        if self.draft is None or req.draws is None:
            return 1
        n = min(1 + self.draft.accepted(req.draws), req.max_new - req.emitted)
        req.spec[0] += 1
        req.spec[1] += n - 1
        req.spec[2] += self.draft.proposed
        return n

    def _emit(self, req: Request, n: int = 1) -> None:
        req.emitted += n
        done = req.emitted >= req.max_new or self.role == "prefill"
        if done:
            with self._lock:
                self._inflight -= 1
                if self._inflight == 0:
                    self._period_ended()
        req.events.put((req.emitted, done))

    def _schedule(self, req: Request, due: float) -> None:
        with self._decode_cv:
            self._seq += 1
            heapq.heappush(self._decode, (due, self._seq, req))
            self._decode_cv.notify_all()

    def _decode_loop(self) -> None:
        while not self._stop.is_set():
            with self._decode_cv:
                while not self._decode and not self._stop.is_set():
                    self._decode_cv.wait(0.5)
                if self._stop.is_set():
                    return
                due, _, req = self._decode[0]
                if due > time.perf_counter():
                    self._decode_cv.wait(min(0.05, due - time.perf_counter()))
                    continue
                heapq.heappop(self._decode)
            self._emit(req, self._step_tokens(req))
            if req.emitted < req.max_new:
                self._schedule(req, due + self._step_s(req))


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)
