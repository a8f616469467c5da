"""The async streaming HTTP client and its single timing loop (httpx, one pooled client per run).

:class:`BenchClient` owns one ``httpx.AsyncClient`` whose connection pool is sized to the run's
concurrency (never a client per request), with explicit lifecycle states (unopened -> opened ->
closed, misuse raises), a :class:`BenchTimeouts` value object and an injectable transport for tests.
Plain ``http://`` goes through :class:`~pytest_sskj.bench.transport.LeanTransport` (big reads, one pass
over the chunked encoding per read); ``https://`` through httpx's default transport, same pool size.
:meth:`BenchClient.stream_request` is the one timing loop for every endpoint: it stamps ``t_send``,
iterates the response with ``aiter_raw`` (whatever the transport read, no line splitting, no size cap:
16K-token prompts and long streams do not choke a small buffer), stamps every read (with its kernel
receive time where the lean transport has one, so the loop's own backlog is not in the figures), feeds the bytes to
:class:`~pytest_sskj.bench.sse.SSEParser`, asks the endpoint adapter what each frame means and fills a
:class:`~pytest_sskj.bench.records.RequestRecord`.  It never raises for anything the server does:
non-200 answers, transport errors, bad JSON, invalid UTF-8, truncated streams and error frames all end
up as ``record.error`` for the oracle.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from types import TracebackType
from typing import TYPE_CHECKING, Any

import httpx

from pytest_sskj.bench.endpoints import BadFrame, Endpoint, FrameDecoder, FrameInfo
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.sse import DONE, SSEEvent, SSEParser
from pytest_sskj.bench.transport import LeanTransport

if TYPE_CHECKING:
    from pytest_sskj.engines.base import CacheReset

__all__ = ["TOKEN_ALLOWANCE_S", "BenchClient", "BenchTimeouts", "ClientState", "ReadStats"]

_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "text/event-stream",
    "Accept-Encoding": "identity",  # raw bytes on the wire are the SSE bytes
}
_ERROR_BODY_CAP = 2000


class ClientState(enum.Enum):
    UNOPENED = 1
    OPENED = 2
    CLOSED = 3


TOKEN_ALLOWANCE_S = 2.0
"""Seconds per output token a request's deadline allows (a TPOT far beyond any SLO: GPU 50 ms, CPU 2 s)."""


@dataclass(frozen=True)
class BenchTimeouts:
    """Seconds allowed to connect, to write a request, and between two reads of a response; and the
    run's hang bounds.

    ``read_s`` bounds the silence between reads (a 16K-token prefill at high concurrency can take
    minutes before the first byte), not the whole request.  ``stall_s``: no token on any request for
    this long while a request is open (sent, not finished; the first token included) fails it as
    *stalled*, whatever bytes arrive meanwhile (a 1 byte/s drip of keep-alives is no progress).
    ``deadline_s``: a request open longer than this fails too.  Either one ends the phase: the server
    is hung, so the open requests are aborted and the unsent ones are not sent
    (see :mod:`pytest_sskj.bench.runner`).
    """

    connect_s: float = 30.0
    write_s: float = 120.0
    read_s: float = 1800.0
    stall_s: float | None = None
    deadline_s: float | None = None

    @classmethod
    def for_shape(
        cls, stall_s: float, osl: int, concurrency: int = 1, *, per_token_s: float = TOKEN_ALLOWANCE_S
    ) -> BenchTimeouts:
        """Hang bounds derived from the shape: the stall timeout, and a per-request deadline of the stall
        timeout plus ``per_token_s`` for every output token of the ``concurrency`` requests a one-slot
        server may serve before this one finishes."""
        deadline = stall_s + max(1, concurrency) * max(1, osl) * per_token_s
        return cls(read_s=max(stall_s, 1.0) + 5.0, stall_s=stall_s, deadline_s=deadline)

    def to_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(connect=self.connect_s, write=self.write_s, read=self.read_s, pool=None)


@dataclass
class ReadStats:
    """Counts of the token-carrying network reads of every stream of one client (what the client-bound check
    reads, :meth:`pytest_sskj.bench.saturation.SaturationMonitor.start`).

    A server sends one SSE event per token step, each in its own write; a client that keeps up reads them one
    by one.  A read that carries several events with tokens (``multi_frame``) was drained late -- the event
    loop got to the socket after several steps -- and all its tokens share one stamp: per-token times (TPOT,
    ITL) are unreliable, E2E stays right."""

    token_reads: int = 0
    multi_frame: int = 0

    def snapshot(self) -> tuple[int, int]:
        return self.token_reads, self.multi_frame


class BenchClient:
    """One pooled streaming client for one benchmark run (``async with BenchClient(c) as client``)."""

    def __init__(
        self,
        concurrency: int,
        *,
        timeouts: BenchTimeouts | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        lean: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"BenchClient concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.timeouts = timeouts or BenchTimeouts()
        self.lean = lean and transport is None
        """Whether plain-http requests go through :class:`LeanTransport` (default) or httpx's own."""
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._lean_client: httpx.AsyncClient | None = None
        self.state = ClientState.UNOPENED
        self.reads = ReadStats()
        """Token-carrying reads of every stream so far, and how many carried several events."""

    # --- lifecycle ------------------------------------------------------------------------------
    async def open(self) -> BenchClient:
        if self.state is ClientState.OPENED:
            raise RuntimeError("BenchClient is already open")
        if self.state is ClientState.CLOSED:
            raise RuntimeError("Cannot reopen a BenchClient once it has been closed; create a new one")
        if not self.lean:
            self._client = self._default_client()
        else:
            t = self.timeouts
            lean = LeanTransport(self.concurrency, connect_timeout=t.connect_s, read_timeout=t.read_s)
            self._lean_client = httpx.AsyncClient(timeout=t.to_httpx(), transport=lean, trust_env=False)
        self.state = ClientState.OPENED
        return self

    def _default_client(self) -> httpx.AsyncClient:
        """httpx's own pooled transport (https, or an injected test transport), sized to the concurrency."""
        limits = httpx.Limits(
            max_connections=self.concurrency,
            max_keepalive_connections=self.concurrency,
            keepalive_expiry=60.0,
        )
        return httpx.AsyncClient(
            limits=limits, timeout=self.timeouts.to_httpx(), transport=self._transport, trust_env=False
        )

    async def aclose(self) -> None:
        for c in (self._client, self._lean_client):
            if c is not None:
                await c.aclose()
        self._client = self._lean_client = None
        self.state = ClientState.CLOSED

    async def __aenter__(self) -> BenchClient:
        return await self.open()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _http(self, url: str) -> httpx.AsyncClient:
        if self.state is not ClientState.OPENED:
            state = "closed" if self.state is ClientState.CLOSED else "not opened yet"
            raise RuntimeError(f"BenchClient is {state}: use 'async with BenchClient(...)' around requests")
        if self._lean_client is not None and url.startswith("http://"):
            return self._lean_client
        if self._client is None:  # built on first https use: its TLS context costs tens of ms
            self._client = self._default_client()
        return self._client

    # --- small control requests ------------------------------------------------------------------
    async def get_json(self, base_url: str, path: str) -> Any | None:
        """GET ``base_url + path`` and return its JSON, or None on any error / non-200 answer."""
        try:
            r = await self._http(base_url).get(base_url.rstrip("/") + path, timeout=30.0)
        except httpx.HTTPError:
            return None
        if r.status_code != 200:
            return None
        try:
            return r.json()
        except ValueError:
            return None

    async def flush_cache(self, base_url: str, resets: Sequence[CacheReset] | None = None) -> str:
        """Ask the server to drop its prefix cache the engine's way (``Engine.cache_reset``); returns what
        happened, in words.

        ``resets``: the engine's reset(s), tried in order while the server answers 404; ``None`` (the
        engine is unknown): every engine's, in registry order (SGLang's ``POST /flush_cache``, then vLLM's
        ``POST /reset_prefix_cache``).  ``"flushed"`` on success of the first (a later one:
        ``"flushed (<path>)"``), ``"unsupported (HTTP 404)"`` where the server has none (not an error:
        llama.cpp has none), ``"refused (HTTP 400: ...)"`` when the server declines (SGLang while requests
        run; vLLM ``success`` false), ``"failed: ..."`` on a transport error, ``"skipped (...)"`` for an
        engine without a reset.
        """
        if resets is None:
            from pytest_sskj.engines import cache_resets

            resets = cache_resets()
        if not resets:
            return "skipped (the engine has no cache reset)"
        for n, reset in enumerate(resets):
            what = await self._reset(base_url, reset)
            if what is not None:
                return what if n == 0 or not what.startswith("flushed") else f"flushed ({reset.path})"
        return "unsupported (HTTP 404)"

    async def _reset(self, base_url: str, reset: CacheReset) -> str | None:
        """One reset request; ``None`` when the server does not have it (404)."""
        url = base_url.rstrip("/") + reset.path
        try:
            r = await self._http(url).request(reset.method, url, timeout=60.0)
            if r.status_code == 405 and reset.method_on_405:
                r = await self._http(url).request(reset.method_on_405, url, timeout=60.0)
        except httpx.HTTPError as exc:
            return f"failed: {type(exc).__name__}: {exc}"
        if r.status_code == 404:
            return None
        ok = 200 <= r.status_code < 300
        if ok and reset.success_key is not None:
            try:
                ok = r.json().get(reset.success_key) is True
            except (ValueError, AttributeError):
                ok = False
        return "flushed" if ok else f"refused (HTTP {r.status_code}: {r.text[:200]})"

    # --- the timing loop -------------------------------------------------------------------------
    async def stream_request(self, base_url: str, endpoint: Endpoint, body: bytes, rec: RequestRecord) -> RequestRecord:
        """Send one streaming request and fill ``rec`` (stamps, token counts, server counts, errors)."""
        url = base_url.rstrip("/") + endpoint.path
        http = self._http(url)
        parser = SSEParser()
        rec.t_send = perf_counter()
        t_done: float | None = None
        try:
            async with http.stream("POST", url, content=body, headers=_HEADERS) as resp:
                rec.http_status = resp.status_code
                if resp.status_code != 200:
                    rec.set_error(f"HTTP {resp.status_code} from {endpoint.path}: {await _capped_body(resp)}")
                else:
                    t_done = await _read_stream(resp, endpoint, parser, rec, self.reads)
        except httpx.HTTPError as exc:
            rec.set_error(f"{type(exc).__name__} on {endpoint.path}: {exc or 'no detail'}")
        except OSError as exc:
            rec.set_error(f"{type(exc).__name__} on {endpoint.path}: {exc}")
        rec.t_end = t_done if t_done is not None else perf_counter()
        rec.frames = parser.events
        rec.bytes_received = parser.bytes_fed
        rec.done_seen = parser.done
        return rec


async def _read_stream(
    resp: httpx.Response, endpoint: Endpoint, parser: SSEParser, rec: RequestRecord, reads: ReadStats | None = None
) -> float | None:
    """Read a 200 stream: every read's frames into ``rec`` (and its count into ``reads``); returns when
    ``[DONE]`` arrived (``None``: never)."""
    decoder = endpoint.decoder()
    times, toks = rec.chunk_times, rec.chunk_tokens
    t_done: float | None = None
    encoded = "content-encoding" in resp.headers
    chunks = resp.aiter_bytes() if encoded else resp.aiter_raw()
    # the lean transport knows when each read arrived (the kernel's receive stamp): a read the loop got to
    # late keeps its arrival time; other transports: the time it is handed up
    stamps = None if encoded else resp.extensions.get("sskj_arrival")
    async for raw in chunks:
        now = stamps.arrival if stamps is not None else perf_counter()
        events = parser.feed(raw)
        if parser.invalid:
            rec.set_error(parser.invalid[0])
        datas, done = _split_events(events, rec)
        if done and t_done is None:
            t_done = now
        new = _read_tokens(datas, endpoint, decoder, rec) if datas else 0
        if new:
            if rec.t_first is None:
                rec.t_first = now
            times.append(now)
            toks.append(new)
            if reads is not None:
                reads.token_reads += 1
                if new > 1 and len(datas) > 1:  # several token events in one read: drained late, one stamp
                    reads.multi_frame += 1
    rest = parser.close()
    if rest:
        rec.set_error(f"stream ended inside a frame (truncated): {len(rest)} bytes left, {rest[:80]!r}")
    return t_done


def _split_events(events: list[SSEEvent], rec: RequestRecord) -> tuple[list[str], bool]:
    """One read's data frames, and whether it carried ``[DONE]``; a server ``error`` event fails ``rec``."""
    datas: list[str] = []
    done = False
    for ev in events:
        data = ev[0]
        if data == DONE:
            done = True
        elif ev[1] == "error":
            rec.set_error(f"server error event: {data[:300]}")
        else:
            datas.append(data)
    return datas, done


def _read_tokens(datas: list[str], endpoint: Endpoint, decoder: FrameDecoder, rec: RequestRecord) -> int:
    """Tokens of one read's frames; server counts, finish reason and frame errors into ``rec``."""
    fast = endpoint.read_info(datas, decoder)
    if fast is not None:
        _note(rec, fast)
        rec.completion_tokens = fast.completion_tokens
        return fast.tokens
    new = 0
    for obj, data in zip(endpoint.loads_many(datas), datas, strict=True):
        if obj.__class__ is BadFrame:
            rec.set_error(f"bad JSON frame: {data[:200]!r}")
            continue
        if not isinstance(obj, dict):
            rec.set_error(f"frame is not a JSON object: {data[:200]!r}")
            continue
        try:
            info = decoder.decode(obj)
        except (AttributeError, TypeError, KeyError, IndexError) as exc:
            rec.set_error(f"malformed {endpoint.name} frame ({exc!r}): {data[:200]!r}")
            continue
        new += info.tokens or 0
        if info.error is not None:
            rec.set_error(info.error)
        _note(rec, info)
        if info.completion_tokens is not None:
            rec.completion_tokens = info.completion_tokens
    return new


def _note(rec: RequestRecord, info: FrameInfo) -> None:
    if info.finish_reason is not None:
        rec.finish_reason = info.finish_reason
    if info.spec is not None:
        rec.spec = info.spec
    if info.prompt_tokens is not None:
        rec.prompt_tokens = info.prompt_tokens


async def _capped_body(resp: httpx.Response) -> str:
    buf = b""
    try:
        async for b in resp.aiter_bytes():
            buf += b
            if len(buf) >= _ERROR_BODY_CAP:
                break
    except httpx.HTTPError as exc:
        return f"{buf[:_ERROR_BODY_CAP].decode('utf-8', 'replace')} [body read failed: {exc}]"
    return buf[:_ERROR_BODY_CAP].decode("utf-8", "replace").strip() or "(empty body)"
