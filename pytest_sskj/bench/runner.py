"""Runs a benchmark point: cache flush, warmup, the measured phase, records, metrics, verdicts.

:func:`arun_bench` (async) and :func:`run_bench` (sync wrapper) run one repeat of a :class:`Workload`
against one or more base URLs (requests are spread round-robin): they flush the server's prefix cache
where it offers ``/flush_cache`` (a 404 is recorded, not an error), send the warmup requests (excluded
from metrics), then the measured ones under the concurrency limit and the optional Poisson arrival
schedule, while :class:`~pytest_sskj.bench.saturation.SaturationMonitor` watches the client itself (the
objects built before the measured phase are frozen out of the garbage collector while it runs).
Every finished request is judged by the oracle and appended to ``out_dir/requests.jsonl`` at once;
the result is also written to ``out_dir/result-r<repeat>.json``.  :func:`run_repeats` runs R repeats
(fresh prompt ids each) and returns the per-repeat results with their median and spread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_sskj.bench.client import BenchClient, BenchTimeouts
from pytest_sskj.bench.endpoints import Endpoint, get_endpoint
from pytest_sskj.bench.metrics import compute_metrics
from pytest_sskj.bench.oracle import judge
from pytest_sskj.bench.records import RecordSink, RequestRecord
from pytest_sskj.bench.result import BenchResult, RepeatsResult
from pytest_sskj.bench.saturation import SaturationMonitor, SaturationThresholds
from pytest_sskj.bench.workload import PlannedRequest, Workload, plan_requests
from pytest_sskj.rundir import atomic_write_text

if TYPE_CHECKING:
    from pytest_sskj.engines.base import CacheReset

__all__ = ["REQUESTS_FILE", "arun_bench", "arun_warmup", "run_bench", "run_repeats", "run_warmup"]

REQUESTS_FILE = "requests.jsonl"
_T = TypeVar("_T")

Progress = Callable[[int, int], None]
Urls = str | Sequence[str]


def _normalize_urls(urls: Urls) -> list[str]:
    lst = [urls] if isinstance(urls, str) else list(urls)
    out = [u.rstrip("/") for u in lst if u]
    if not out:
        raise ValueError("run_bench needs at least one base URL (e.g. http://127.0.0.1:30000)")
    for u in out:
        if not u.startswith(("http://", "https://")):
            raise ValueError(f"base URL {u!r} must start with http:// or https://")
    return out


async def _discover_model(client: BenchClient, url: str) -> str | None:
    data = await client.get_json(url, "/v1/models")
    try:
        model = data["data"][0]["id"]  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        return None
    return model if isinstance(model, str) else None


async def _model(client: BenchClient, workload: Workload, endpoint: Endpoint, url: str, hung: list[str]) -> str | None:
    """The model name the requests carry: the workload's, else the first ``/v1/models`` lists (not for
    ``/generate``, which names none), within the stall timeout (``hung`` says so when it passed)."""
    if workload.model is not None or endpoint.name == "generate":
        return workload.model
    return await _bounded(_discover_model(client, url), client, "GET /v1/models", hung)


async def _bounded(coro: Coroutine[Any, Any, _T], client: BenchClient, what: str, hung: list[str]) -> _T | None:
    """Await a control request within the stall timeout; past it, record why the server counts as hung."""
    stall = client.timeouts.stall_s
    if stall is None:
        return await coro
    try:
        return await asyncio.wait_for(coro, stall)
    except asyncio.TimeoutError:
        hung.append(f"{what} stalled: no answer in {stall:g} s (stall timeout)")
        return None


class _Kept:
    """Where :func:`arun_warmup` keeps its judged records (the bench that uses them writes them to its file)."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []

    def write(self, rec: RequestRecord, **extra: Any) -> None:
        self.records.append(rec)


class _Point:
    """State of one repeat while it runs (kept off the module: one object per call)."""

    def __init__(
        self,
        client: BenchClient,
        endpoint: Endpoint,
        workload: Workload,
        urls: list[str],
        repeat: int,
        sink: RecordSink | _Kept,
        label: str,
        model: str | None,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.workload = workload
        self.urls = urls
        self.repeat = repeat
        self.sink = sink
        self.label = label
        self.model = model
        self.timeouts = client.timeouts
        self.stalled: str | None = None
        """Why the phase was stopped (a request stalled or passed its deadline), else ``None``."""

    def body(self, p: PlannedRequest) -> bytes:
        payload = self.endpoint.payload(p.prompt_ids, p.osl, model=self.model, ignore_eos=self.workload.ignore_eos)
        return json.dumps(payload, separators=(",", ":")).encode()

    def record(self, p: PlannedRequest) -> RequestRecord:
        return RequestRecord(
            index=p.index,
            warmup=p.warmup,
            repeat=self.repeat,
            url=self.urls[p.index % len(self.urls)],
            endpoint=self.endpoint.name,
            isl=p.isl,
            osl=p.osl,
            ignore_eos=self.workload.ignore_eos,
            exact_prompt=self.endpoint.exact_prompt,
        )

    def finish(self, rec: RequestRecord) -> None:
        judge(rec, exact_tokens=self.endpoint.exact_tokens)
        self.sink.write(rec, label=self.label)

    async def run_phase(
        self,
        planned: list[PlannedRequest],
        *,
        monitor: SaturationMonitor | None,
        progress: Progress | None,
    ) -> list[RequestRecord]:
        """Send ``planned`` under the concurrency limit and arrival schedule; return records in plan order."""
        records = [self.record(p) for p in planned]
        if self.stalled is not None:  # the server already hangs: nothing is sent
            for rec in records:
                self._aborted(rec)
                self.finish(rec)
            return records
        bodies = [self.body(p) for p in planned]  # serialized before the clock starts
        # A queue of slots, each holding the time it was freed: a waiting request knows exactly when it
        # could have gone, which is what dispatch lag is measured against.
        slots: asyncio.Queue[float] = asyncio.Queue()
        for _ in range(self.workload.concurrency):
            slots.put_nowait(0.0)
        total = len(planned)
        done = 0
        t0 = perf_counter()

        async def one(i: int) -> None:
            nonlocal done
            p, rec = planned[i], records[i]
            target = t0 + p.arrival_s
            try:
                delay = target - perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                freed = await slots.get()
                try:
                    rec.t_scheduled = max(target, freed)
                    await self.client.stream_request(rec.url, self.endpoint, bodies[i], rec)
                    if monitor is not None and rec.t_send is not None:
                        monitor.dispatched(rec.t_scheduled, rec.t_send)
                finally:
                    slots.put_nowait(perf_counter())
            except asyncio.CancelledError:
                if self.stalled is None:
                    raise  # cancelled from outside: not ours to record
                self._aborted(rec)
            self.finish(rec)
            done += 1
            if progress is not None:
                progress(done, total)

        tasks = [asyncio.create_task(one(i)) for i in range(total)]
        watch = asyncio.create_task(self._watch(records, tasks)) if self._watching else None
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            if watch is not None:
                watch.cancel()
        return records

    @property
    def _watching(self) -> bool:
        return self.timeouts.stall_s is not None or self.timeouts.deadline_s is not None

    def _overdue(self, rec: RequestRecord, now: float, progress: float | None = None) -> str | None:
        """Why an open request counts as hung at ``now``: neither it nor any other request of the phase got a
        token for ``stall_s`` (``progress``: the phase's last token; queued requests of a busy server are not
        stalled while others advance), or it has been open longer than ``deadline_s``."""
        if rec.t_send is None or rec.t_end is not None:
            return None
        stall, deadline = self.timeouts.stall_s, self.timeouts.deadline_s
        last = max(rec.chunk_times[-1] if rec.chunk_times else rec.t_send, progress or 0.0)
        what = "first token" if rec.t_first is None else "next token"
        if stall is not None and now - last > stall:
            return (
                f"stalled: no token from the server for {now - last:.2f} s while requests were open (this one: "
                f"{what} pending, {rec.bytes_received} bytes so far; stall timeout {stall:g} s)"
            )
        if deadline is not None and now - rec.t_send > deadline:
            return (
                f"deadline: open for {now - rec.t_send:.2f} s with {sum(rec.chunk_tokens)} of {rec.osl} tokens "
                f"(per-request deadline {deadline:g} s)"
            )
        return None

    async def _watch(self, records: list[RequestRecord], tasks: list[asyncio.Task[None]]) -> None:
        """Stop the phase once an open request is overdue: the server hangs, the rest would only wait."""
        tick = min(0.25, (self.timeouts.stall_s or 1.0) / 4)
        while self.stalled is None:
            await asyncio.sleep(tick)
            now = perf_counter()
            progress = max((r.chunk_times[-1] for r in records if r.chunk_times), default=None)
            for rec in records:
                why = self._overdue(rec, now, progress)
                if why is not None:
                    self.stalled = f"request #{rec.index} {why}"
                    break
        for t in tasks:
            t.cancel()

    def _aborted(self, rec: RequestRecord) -> None:
        """Record a request the hang watchdog stopped (open) or kept from being sent."""
        now = perf_counter()
        if rec.t_send is None:
            rec.set_error(f"not sent: the phase stopped ({self.stalled})")
            return
        why = self._overdue(rec, now)  # its own stall or deadline, or aborted because the server hangs
        if rec.t_end is None:
            rec.t_end = now
        rec.set_error(why or f"aborted: the server hangs ({self.stalled})")


async def _warmup(
    point: _Point, warm: list[PlannedRequest], warmed: Sequence[RequestRecord] | None
) -> list[RequestRecord]:
    """The repeat's warmup records: sent now, or (``warmed``) sent before and only written to its file."""
    if warmed is None:
        return await point.run_phase(warm, monitor=None, progress=None) if warm else []
    for rec in warmed:
        point.sink.write(rec, label=point.label)
    return list(warmed)


async def arun_bench(
    urls: Urls,
    workload: Workload,
    out_dir: Path,
    *,
    repeat: int = 0,
    label: str = "",
    progress: Progress | None = None,
    flush_cache: bool = True,
    cache_reset: Sequence[CacheReset] | None = None,
    client: BenchClient | None = None,
    timeouts: BenchTimeouts | None = None,
    thresholds: SaturationThresholds | None = None,
    warmed: Sequence[RequestRecord] | None = None,
) -> BenchResult:
    """Run repeat ``repeat`` of ``workload`` against ``urls``; see the module docstring.

    ``client``: an already opened :class:`BenchClient` to reuse (it is left open); by default one is
    created for this run, sized to ``workload.concurrency``, and closed at the end.

    ``warmed``: this repeat's warmup already happened, so none is sent: the records :func:`arun_warmup`
    returned for the same workload and repeat (written to ``requests.jsonl`` and counted as this run's
    ``warmup``), or ``[]`` when the server was warmed by an earlier measured phase of its run.  The plan is
    the same either way: the measured prompts keep their numbers and ids.
    """
    url_list = _normalize_urls(urls)
    endpoint = get_endpoint(workload.endpoint, token_ids=workload.token_ids)
    plan = plan_requests(workload, repeat)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(BenchClient(workload.concurrency, timeouts=timeouts))
        hung: list[str] = []
        model = await _model(client, workload, endpoint, url_list[0], hung)
        flushes = {}
        for u in url_list:
            if flush_cache and not hung:
                flushes[u] = (
                    await _bounded(client.flush_cache(u, cache_reset), client, "cache reset", hung) or "no answer"
                )
            else:
                flushes[u] = "skipped"
        sink = stack.enter_context(RecordSink(out_dir / REQUESTS_FILE))
        point = _Point(client, endpoint, workload, url_list, repeat, sink, label or workload.label, model)
        point.stalled = hung[0] if hung else None  # a server that does not answer a control request hangs
        warm = [p for p in plan if p.warmup]
        measured = [p for p in plan if not p.warmup]
        warm_records = await _warmup(point, warm, warmed)
        monitor = SaturationMonitor(thresholds=thresholds)
        # Everything allocated so far (prompts, payloads, the client, the session's heap) is moved out of the
        # collector's reach, so a full collection during the measured phase only walks new objects: fewer long
        # loop stalls.  No gc.collect() first: it walked the whole session's heap before every point (0.05-0.4 s
        # a point, between the points' measured phases: overhead); garbage frozen here is unfrozen with the rest
        # after the phase and collected then.
        gc.freeze()
        monitor.start(reads=client.reads)
        try:
            records = await point.run_phase(measured, monitor=monitor, progress=progress)
        finally:
            await monitor.stop()
            gc.unfreeze()
    metrics = compute_metrics(records, max_concurrency=workload.concurrency)
    client_bound, evidence = monitor.verdict(
        ttft_p50_ms=_num(metrics.get("median_ttft_ms")),
        e2e_p50_ms=_num(metrics.get("median_e2e_latency_ms")),
        concurrency=workload.concurrency,
    )
    metrics.update(
        {
            "isl": workload.isl,
            "osl": workload.osl,
            "repeat": repeat,
            "warmup": len(warm_records),
            "warmup_failed": sum(1 for r in warm_records if not r.ok),
            "request_rate": None if workload.request_rate == float("inf") else workload.request_rate,
            "client_bound": client_bound,
            "client_bound_reasons": "; ".join(evidence["reasons"]) or None,
            "client_bound_bursts_only": evidence["bursts_only"],
            "client_bound_advice": evidence["advice"],
            "event_loop_lag_p90_ms": evidence["loop_lag_p90_ms"],
            "event_loop_lag_p99_ms": evidence["loop_lag_p99_ms"],
            "dispatch_lag_p99_ms": evidence["dispatch_lag_p99_ms"],
            "client_cpu_share": evidence["client_cpu_share"],
            "multi_frame_read_share": evidence["multi_frame_read_share"],
        }
    )
    result = BenchResult(
        workload=workload,
        repeat=repeat,
        label=label or workload.label,
        urls=url_list,
        out_dir=out_dir,
        metrics=metrics,
        records=records,
        warmup_records=warm_records,
        client_bound=client_bound,
        client_evidence=evidence,
        cache_flush=flushes,
        stalled=point.stalled,
    )
    _write_result(result)
    return result


def _num(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _write_result(result: BenchResult) -> None:
    doc: dict[str, Any] = {
        "label": result.label,
        "repeat": result.repeat,
        "urls": result.urls,
        "workload": dataclasses.asdict(result.workload),
        "metrics": result.metrics,
        "failures": result.failures,
        "client_bound": result.client_bound,
        "client_evidence": result.client_evidence,
        "cache_flush": result.cache_flush,
        "stalled": result.stalled,
    }
    doc["workload"]["avoid_ids"] = list(result.workload.avoid_ids)
    if doc["workload"]["request_rate"] == float("inf"):
        doc["workload"]["request_rate"] = None
    path = result.out_dir / f"result-r{result.repeat}.json"
    atomic_write_text(path, json.dumps(doc, indent=2, default=str) + "\n")


def run_bench(
    urls: Urls,
    workload: Workload,
    out_dir: Path,
    *,
    repeat: int = 0,
    label: str = "",
    progress: Progress | None = None,
    flush_cache: bool = True,
    cache_reset: Sequence[CacheReset] | None = None,
    timeouts: BenchTimeouts | None = None,
    thresholds: SaturationThresholds | None = None,
    warmed: Sequence[RequestRecord] | None = None,
) -> BenchResult:
    """Synchronous :func:`arun_bench` (runs its own event loop; from async code await ``arun_bench``)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("run_bench() was called inside a running event loop; use 'await arun_bench(...)'")
    return asyncio.run(
        arun_bench(
            urls,
            workload,
            out_dir,
            repeat=repeat,
            label=label,
            progress=progress,
            flush_cache=flush_cache,
            cache_reset=cache_reset,
            timeouts=timeouts,
            thresholds=thresholds,
            warmed=warmed,
        )
    )


async def arun_warmup(
    urls: Urls,
    workload: Workload,
    *,
    repeat: int = 0,
    label: str = "",
    timeouts: BenchTimeouts | None = None,
) -> list[RequestRecord]:
    """Send only the warmup requests of repeat ``repeat`` of ``workload`` (the very requests :func:`arun_bench`
    would send first) and return their judged records, to pass to :func:`arun_bench` as ``warmed``.

    The acceptance runner sends them to a server started early (``ServingPool.prepare``) while the previous
    point's post-bench phases run, so the warmup no longer lies between two measured phases."""
    url_list = _normalize_urls(urls)
    endpoint = get_endpoint(workload.endpoint, token_ids=workload.token_ids)
    warm = [p for p in plan_requests(workload, repeat) if p.warmup]
    if not warm:
        return []
    async with BenchClient(workload.concurrency, timeouts=timeouts) as client:
        hung: list[str] = []
        model = await _model(client, workload, endpoint, url_list[0], hung)
        kept = _Kept()
        point = _Point(client, endpoint, workload, url_list, repeat, kept, label or workload.label, model)
        point.stalled = hung[0] if hung else None
        return await point.run_phase(warm, monitor=None, progress=None)


def run_warmup(
    urls: Urls,
    workload: Workload,
    *,
    repeat: int = 0,
    label: str = "",
    timeouts: BenchTimeouts | None = None,
) -> list[RequestRecord]:
    """Synchronous :func:`arun_warmup` (runs its own event loop, on the calling thread)."""
    return asyncio.run(arun_warmup(urls, workload, repeat=repeat, label=label, timeouts=timeouts))


def run_repeats(
    urls: Urls,
    workload: Workload,
    out_dir: Path,
    repeats: int,
    *,
    label: str = "",
    progress: Callable[[int, int, int, int], None] | None = None,
    flush_cache: bool = True,
    cache_reset: Sequence[CacheReset] | None = None,
    timeouts: BenchTimeouts | None = None,
) -> RepeatsResult:
    """``repeats`` repeats of ``workload`` (fresh prompt ids each, cache flushed before each where offered).

    ``progress(repeat, repeats, done, total)`` is called as requests finish.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    results = []
    for r in range(repeats):
        cb: Progress | None = None
        if progress is not None:
            cb = _bind_repeat(progress, r, repeats)
        results.append(
            run_bench(
                urls,
                workload,
                out_dir,
                repeat=r,
                label=label,
                progress=cb,
                flush_cache=flush_cache,
                cache_reset=cache_reset,
                timeouts=timeouts,
            )
        )
    return RepeatsResult(results)


def _bind_repeat(progress: Callable[[int, int, int, int], None], r: int, repeats: int) -> Progress:
    def cb(done: int, total: int) -> None:
        progress(r, repeats, done, total)

    return cb
