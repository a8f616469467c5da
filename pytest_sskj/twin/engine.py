"""The twin's serving model: a paced prefill engine and per-request decode timelines.

:class:`ServingEngine` is what a stand-in rank 0 runs.  Requests join a FIFO prefill queue; one engine
thread cuts it into chunk-sized steps (``--chunked-prefill-size`` tokens, several requests packed into one
step when they fit) and sleeps each step for ``tokens * multiplier / rate`` modelled seconds, the rate
shared by every queued request -- so TTFT grows with the concurrency while throughput saturates, as on the
users' cluster.  A request's first token is emitted at the end of its last prefill chunk; its further
tokens follow on its own decode timeline (one step of the cell's TPOT each, log-normally spread per
request).  Every duration is multiplied by the model's ``time_scale``.  The modelled GPU keeps its own clock:
a step starts when the previous one ended or when its first request arrived, never when the engine thread
happens to wake, so a rank descheduled by its host loses no modelled time while work is queued (a late
wake-up is caught up in full), and no step starts before its requests arrived.  One draw of between-repeat noise per
repeat (each ``/flush_cache`` starts one) scales the rate, seeded by the model's seed, the server's cell
and the repeat, so a run is reproducible.  The parameters come from :func:`pytest_sskj.twin.model.calibrate`.

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

from pytest_sskj.twin.model import Cell, EngineParams, TwinModel, calibrate, lognormal_quantiles

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
    mult: float = 1.0
    tpot_s: float = 0.0
    emitted: int = 0
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
        """Prefill rate at ``n`` requests in the system (linear between measured concurrencies, flat outside)
        and the nearest cell's parameters."""
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

    def __init__(self, model: TwinModel, cells: Sequence[Cell], *, chunk: int | None, role: str, label: str) -> None:
        if not cells:
            raise ValueError("a serving engine needs at least one cell")
        by_isl: dict[int, list[tuple[int, Cell, EngineParams]]] = {}
        for c in cells:
            by_isl.setdefault(c.isl, []).append((c.concurrency, c, calibrate(c, model.default_tpot_ms)))
        self.curves = tuple(_Curve(isl, tuple(sorted(v, key=lambda p: p[0]))) for isl, v in sorted(by_isl.items()))
        self.scale = model.time_scale
        self.seed = model.seed
        self.chunk = chunk if chunk and chunk > 0 else 8192
        self.role = role
        self.label = label
        self.epoch = 0
        self._factor = 1.0
        self._lock = threading.Condition()
        self._queue: list[Request] = []
        self._inflight = 0
        self._rooms: dict[str, float] = {}
        self._decode: list[tuple[float, int, Request]] = []
        self._decode_cv = threading.Condition()
        self._seq = 0
        self._rng = random.Random(self._seed_of("requests", 0))
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
            self._rng = random.Random(self._seed_of("requests", self.epoch))
            self._index = 0

    def curve(self, isl: int) -> _Curve:
        return min(self.curves, key=lambda c: abs(math.log(max(1, isl) / c.isl)))

    def submit(self, prompt: list[int], max_new: int, room: str | None = None) -> Request:
        """Queue a request for prefill (``prefill``/``serve`` roles); its events tell the caller what to send."""
        req = Request(list(prompt), max(1, max_new), room=room, arrival=time.perf_counter(), remaining=len(prompt))
        with self._lock:
            _, cell, p = self.curve(len(prompt)).at(self._inflight + 1)
            req.mult = self._multiplier(cell, p)
            req.tpot_s = p.tpot_s * (math.exp(self._rng.gauss(0.0, p.tpot_sigma)) if p.tpot_sigma else 1.0)
            self._inflight += 1
            self._queue.append(req)
            self._lock.notify_all()
        return req

    def _multiplier(self, cell: Cell, p: EngineParams) -> float:
        """The next request's prefill cost multiplier: the repeat's requests take the calibrated spread's
        quantiles (blocks of the cell's requests per repeat), in an order drawn for the repeat."""
        k, n = self._index, cell.requests
        self._index += 1
        block = lognormal_quantiles(n, p.service_cv, seed=self._seed_of(f"order{k // n}/{cell.key}", self.epoch))
        return block[k % n]

    def submit_decode(self, prompt: list[int], max_new: int) -> Request:
        """A decode-role request whose KV has arrived: first token now, then its decode timeline."""
        req = Request(list(prompt), max(1, max_new), arrival=time.perf_counter(), remaining=0)
        with self._lock:
            _, _, p = self.curve(len(prompt)).at(self._decoding() + 1)
            req.tpot_s = p.tpot_s * (math.exp(self._rng.gauss(0.0, p.tpot_sigma)) if p.tpot_sigma else 1.0)
            self._inflight += 1
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
    def _decoding(self) -> int:
        return len(self._decode)

    def _take_step(self, cut: float) -> tuple[list[tuple[Request, int]], float]:
        """Cut the next step off the FIFO queue at time ``cut`` (caller holds the lock): the requests that had
        arrived by then, ``[(request, tokens)]``, and the step's modelled seconds."""
        budget, cost = self.chunk, 0.0
        parts: list[tuple[Request, int]] = []
        rate, _, _ = self.curve(len(self._queue[0].prompt)).at(self._inflight)
        for req in self._queue:
            if budget <= 0:
                break
            if req.arrival > cut and parts:
                continue
            take = min(budget, req.remaining)
            parts.append((req, take))
            cost += take * req.mult
            budget -= take
        return parts, cost / (rate * self._factor)

    def _prefill_loop(self) -> None:
        """The prefill steps on the modelled GPU's own clock (``busy_until``): a step starts when the previous one
        ended or when its first request arrived, whichever is later, however late this thread wakes.  A
        stand-in rank descheduled by its host (CI's other jobs on the same cores) so loses no modelled time
        while work is queued; requests that arrived after a step's start join a later step."""
        busy_until: float | None = None
        idle_since = time.perf_counter() - 1e9
        while not self._stop.is_set():
            with self._lock:
                while not self._queue and not self._stop.is_set():
                    if busy_until is not None:
                        idle_since, busy_until = busy_until, None
                    self._lock.wait(0.5)
                if self._stop.is_set():
                    return
                first = min(r.arrival for r in self._queue)
            gather: float | None = None
            if busy_until is None:
                busy_until = idle_since
                if first - idle_since > max(0.002, 0.1 * self.scale):  # the engine was idle: it wakes up first
                    gather = first + 0.01
                    _sleep_until(gather)  # the rest of the burst arrives
                    with self._lock:
                        _, _, p = self.curve(len(self._queue[0].prompt)).at(self._inflight)
                    busy_until = first + p.wake_s * self.scale
            with self._lock:
                start = max(busy_until, first)  # (first: read above; only this thread removes requests)
                parts, dur = self._take_step(gather if gather is not None else start)
                if gather is None:  # every request queued at the start arrived later: the step waits for it
                    start = max(start, *(r.arrival for r, _ in parts))
            end = start + dur * self.scale
            _sleep_until(end)
            busy_until = end
            finished = []
            with self._lock:
                for req, take in parts:
                    req.remaining -= take
                    if req.remaining <= 0:
                        self._queue.remove(req)
                        finished.append(req)
                        if req.room is not None:
                            self._rooms[req.room] = end
                self._lock.notify_all()
            for req in finished:
                self._first_token(req, end)

    # -- decode ------------------------------------------------------------------------------------------
    def _first_token(self, req: Request, t: float) -> None:
        req.first_token_at = t
        self._emit(req)
        if req.emitted < req.max_new and self.role != "prefill":
            self._schedule(req, t + req.tpot_s * self.scale / self._factor)

    def _emit(self, req: Request) -> None:
        req.emitted += 1
        done = req.emitted >= req.max_new or self.role == "prefill"
        if done:
            with self._lock:
                self._inflight -= 1
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
            self._emit(req)
            if req.emitted < req.max_new:
                self._schedule(req, due + req.tpot_s * self.scale / self._factor)


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left)
