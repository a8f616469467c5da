"""A lean HTTP/1.1 transport for ``httpx.AsyncClient`` that streams large reads (plain ``http://`` only).

Why: httpx's default stack (httpcore + h11) turns every HTTP chunk into an event that climbs several
Python generator layers; an LLM server sends one chunk per SSE frame, so at high token rates the client
spends its core on HTTP framing, not on the stream (see ``benchmarks/bench_client_ingest.py``).  This
transport reads whatever the socket holds (an ``asyncio.Protocol`` buffer, no size cap), undoes the
chunked encoding of a whole read in one pass and hands the decoded bytes up as one piece per network
read, so the SSE parser sees big reads and the timing loop stamps each read once.

It keeps a connection pool of at most ``max_connections`` (keep-alive, one retry on a stale reused
connection), honours connect/read timeouts (the read timeout bounds the silence between two reads),
and maps failures onto httpx's exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``RemoteProtocolError``).  ``https://`` URLs raise ``httpx.UnsupportedProtocol``:
:class:`~pytest_sskj.bench.client.BenchClient` sends those through httpx's default transport.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

__all__ = ["LeanTransport"]

_MAX_HEAD = 1 << 16


class _Proto(asyncio.Protocol):
    """Socket bytes into one buffer; a waiter is woken when bytes or EOF arrive."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.buf = bytearray()
        self.eof = False
        self.exc: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def eof_received(self) -> bool | None:
        self.eof = True
        self._wake()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.exc = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def read(self, timeout: float | None) -> bytes:
        """Everything buffered (waiting up to ``timeout`` s for some); ``b""`` at EOF."""
        while not self.buf:
            if self.eof:
                return b""
            w = self.waiter = self.loop.create_future()
            h = self.loop.call_later(timeout, _expire, w) if timeout is not None else None
            try:
                await w
            finally:
                self.waiter = None
                if h is not None:
                    h.cancel()
        data = bytes(self.buf)
        self.buf.clear()
        return data


def _expire(w: asyncio.Future[None]) -> None:
    if not w.done():
        w.set_exception(TimeoutError())


class _Conn:
    def __init__(self, key: tuple[str, int], proto: _Proto) -> None:
        self.key = key
        self.proto = proto
        self.used = False

    @property
    def alive(self) -> bool:
        return not self.proto.eof and self.proto.transport is not None and not self.proto.transport.is_closing()

    def close(self) -> None:
        if self.proto.transport is not None:
            self.proto.transport.close()


class _Dechunker:
    """Incremental ``Transfer-Encoding: chunked`` decoder: one call per network read."""

    __slots__ = ("done", "pending", "remaining", "skip")

    def __init__(self) -> None:
        self.pending = b""  # an incomplete size line / trailer
        self.remaining = 0  # payload bytes left in the current chunk
        self.skip = 0  # CRLF bytes after a chunk still to skip
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        if self.pending:
            data = self.pending + data
            self.pending = b""
        out: list[bytes] = []
        append = out.append
        find = data.find
        pos = 0
        n = len(data)
        remaining = self.remaining
        skip = self.skip
        while pos < n:
            if remaining:
                end = pos + remaining
                if end > n:
                    append(data[pos:])
                    remaining = end - n
                    pos = n
                    break
                append(data[pos:end])
                remaining = 0
                pos = end
                skip = 2
            if skip:
                if n - pos < skip:
                    skip -= n - pos
                    pos = n
                    break
                pos += skip
                skip = 0
                if pos >= n:
                    break
            eol = find(b"\r\n", pos)
            if eol < 0:
                self.pending = data[pos:]
                break
            line = data[pos:eol]
            try:
                size = int(line, 16)
            except ValueError:
                try:
                    size = int(line.split(b";", 1)[0], 16)  # a chunk extension
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size line {line[:40]!r}") from None
            if size == 0:  # last chunk: an empty line, or trailers and then an empty line
                if data.startswith(b"\r\n", eol + 2) or data.find(b"\r\n\r\n", eol) >= 0:
                    self.done = True
                else:
                    self.pending = data[pos:]
                break
            remaining = size
            pos = eol + 2
        self.remaining = remaining
        self.skip = skip
        return out[0] if len(out) == 1 else b"".join(out)


class _Body(httpx.AsyncByteStream):
    def __init__(self, owner: LeanTransport, conn: _Conn, mode: str, length: int, first: bytes, keep: bool) -> None:
        self.owner = owner
        self.conn = conn
        self.mode = mode  # "chunked" | "length" | "close"
        self.left = length
        self.first = first
        self.keep = keep
        self.complete = False
        self.released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        proto = self.conn.proto
        timeout = self.owner.read_timeout
        dechunk = _Dechunker() if self.mode == "chunked" else None
        data = self.first
        self.first = b""
        while True:
            if data:
                if dechunk is not None:
                    piece = dechunk.feed(data)
                    if piece:
                        yield piece
                    if dechunk.done:
                        self.complete = True
                        return
                elif self.mode == "length":
                    piece = data[: self.left]
                    self.left -= len(piece)
                    if piece:
                        yield piece
                    if self.left <= 0:
                        self.complete = True
                        return
                else:
                    yield data
            if self.mode == "length" and self.left <= 0:
                self.complete = True
                return
            try:
                data = await proto.read(timeout)
            except TimeoutError:
                raise httpx.ReadTimeout(f"no data for {timeout} s while reading the response body") from None
            if not data:
                if self.mode == "close":
                    self.complete = True
                    self.keep = False
                    return
                what = "incomplete chunked read" if dechunk is not None else f"{self.left} bytes missing"
                raise httpx.RemoteProtocolError(
                    f"peer closed connection without sending complete message body ({what})"
                )

    async def aclose(self) -> None:
        if self.released:
            return
        self.released = True
        self.owner._release(self.conn, reuse=self.complete and self.keep)


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio for ``http://`` URLs, pooled to ``max_connections`` (see module docstring)."""

    def __init__(
        self, max_connections: int, *, connect_timeout: float | None = 30.0, read_timeout: float | None = None
    ) -> None:
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._all: set[_Conn] = set()
        self._slots: asyncio.Semaphore | None = None

    def _release(self, conn: _Conn, *, reuse: bool) -> None:
        if reuse and conn.alive:
            self._idle.setdefault(conn.key, []).append(conn)
        else:
            conn.close()
            self._all.discard(conn)
        if self._slots is not None:
            self._slots.release()

    async def _connect(self, key: tuple[str, int], request: httpx.Request) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _Proto(loop), key[0], key[1]), self.connect_timeout
            )
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {key[0]}:{key[1]} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"{exc}", request=request) from None
        conn = _Conn(key, proto)
        self._all.add(conn)
        return conn

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(f"LeanTransport speaks plain http only, not {url.scheme!r}")
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_connections)
        body = request.content if hasattr(request, "_content") else await request.aread()
        key = (url.host, url.port or 80)
        head = [f"{request.method} ".encode(), url.raw_path, b" HTTP/1.1\r\n"]
        for name, value in request.headers.raw:
            head += [name, b": ", value, b"\r\n"]
        if body and "content-length" not in request.headers:
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        wire = b"".join(head) + body
        await self._slots.acquire()
        try:
            for attempt in (0, 1):
                # the retry after a stale keep-alive connection always dials a fresh one: the other idle
                # connections went quiet at the same time and are as likely to be closed already
                idle = self._idle.get(key) if attempt == 0 else None
                conn = None
                while idle:
                    c = idle.pop()
                    if c.alive:
                        conn = c
                        break
                    self._all.discard(c)
                reused = conn is not None
                if conn is None:
                    conn = await self._connect(key, request)
                conn.used = True
                assert conn.proto.transport is not None
                conn.proto.transport.write(wire)
                try:
                    return await self._response(conn, request)
                except _StaleConnection:
                    conn.close()
                    self._all.discard(conn)
                    if not reused or attempt:
                        raise httpx.RemoteProtocolError(
                            "server closed the connection without sending a response", request=request
                        ) from None
            raise AssertionError("unreachable")
        except BaseException:
            self._slots.release()
            raise

    async def _response(self, conn: _Conn, request: httpx.Request) -> httpx.Response:
        proto = conn.proto
        buf = b""
        while True:
            try:
                data = await proto.read(self.read_timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout(f"no response head within {self.read_timeout} s", request=request) from None
            if not data:
                if not buf:
                    raise _StaleConnection()
                raise httpx.RemoteProtocolError("connection closed inside the response head", request=request)
            buf += data
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(buf) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("response head larger than 64 KiB", request=request)
        lines = buf[:end].split(b"\r\n")
        rest = buf[end + 4 :]
        try:
            version, code, *_ = lines[0].split(b" ", 2)
            status = int(code)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad status line {lines[0][:80]!r}", request=request) from None
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers.append((name.strip(), value.strip()))
        lower = {k.lower(): v for k, v in headers}
        keep = version == b"HTTP/1.1" and lower.get(b"connection", b"").lower() != b"close"
        if b"chunked" in lower.get(b"transfer-encoding", b"").lower():
            mode, length = "chunked", 0
        elif b"content-length" in lower:
            mode, length = "length", int(lower[b"content-length"])
        elif status in (204, 304) or request.method == "HEAD":
            mode, length = "length", 0
        else:
            mode, length, keep = "close", 0, False
        stream = _Body(self, conn, mode, length, rest, keep)
        ext: dict[str, Any] = {"http_version": version}
        return httpx.Response(status, headers=headers, stream=stream, extensions=ext)

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any response byte."""
