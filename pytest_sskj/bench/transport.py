"""A lean HTTP/1.1 transport for ``httpx.AsyncClient`` that streams large reads (plain ``http://`` only).

Why: httpx's default stack (httpcore + h11) turns every HTTP chunk into an event that climbs several
Python generator layers; an LLM server sends one chunk per SSE frame, so at high token rates the client
spends its core on HTTP framing, not on the stream (see ``benchmarks/bench_client_ingest.py``).  This
transport reads whatever the socket holds (``recvmsg`` from a loop reader callback, no size cap), undoes
the chunked encoding of a whole read in one pass and hands the decoded bytes up as one piece per network
read, so the SSE parser sees big reads and the timing loop stamps each read once -- with the kernel's
receive time of that read (``SO_TIMESTAMPNS`` on Linux), which the response exposes as
``response.extensions["sskj_arrival"].arrival``: the time the bytes arrived, however long the event loop
took to get to them (see :class:`_Conn`).

It keeps a connection pool of at most ``max_connections`` (keep-alive, one retry on a stale reused
connection), honours connect/read timeouts (the read timeout bounds the silence between two reads),
and maps failures onto httpx's exceptions (``ConnectError``, ``ConnectTimeout``, ``ReadTimeout``,
``RemoteProtocolError``).  ``https://`` URLs raise ``httpx.UnsupportedProtocol``:
:class:`~pytest_sskj.bench.client.BenchClient` sends those through httpx's default transport.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections.abc import AsyncIterator
from time import perf_counter
from typing import Any

import httpx

__all__ = ["LeanTransport"]

_MAX_HEAD = 1 << 16


class _Conn:
    """One non-blocking TCP socket read by a loop reader callback into time-stamped segments.

    The reader callback (``loop.add_reader``) drains the socket with ``recvmsg`` and keeps every read as
    ``(bytes, arrival)``.  ``arrival`` is the kernel's receive time of the read (``SO_TIMESTAMPNS``, the
    time its last packet reached the socket) moved onto the ``perf_counter`` clock; where the platform
    has no such stamp, the time the callback ran.  So a read that waits in the buffer while the event loop
    is busy with other streams (a decode step hands all ``C`` streams a frame at the same instant) keeps the
    time it arrived, not the time the loop got to it: the loop's own work no longer shows in TTFT/ITL.
    """

    def __init__(self, key: tuple[str, int], sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.sock = sock
        self.loop = loop
        self.used = False
        self.segments: list[tuple[bytes, float]] = []
        self.eof = False
        self.closed = False
        self.waiter: asyncio.Future[None] | None = None
        self._anc = socket.CMSG_SPACE(_TIMESPEC.size) if _enable_rx_stamps(sock) else 0
        loop.add_reader(sock.fileno(), self._readable)

    @property
    def alive(self) -> bool:
        return not self.eof and not self.closed

    def _readable(self) -> None:
        sock = self.sock
        segments = self.segments
        while True:
            try:
                data, anc, _, _ = sock.recvmsg(_READ_SIZE, self._anc)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # a reset connection: the body or head read reports it as closed early
                self._at_eof()
                break
            if not data:
                self._at_eof()
                break
            segments.append((data, _arrival(anc)))
        w = self.waiter
        if segments and w is not None and not w.done():
            w.set_result(None)

    def _at_eof(self) -> None:
        self.eof = True
        if not self.closed:
            self.loop.remove_reader(self.sock.fileno())
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def read(self, timeout: float | None) -> list[tuple[bytes, float]]:
        """Every buffered ``(bytes, arrival)`` read (waiting up to ``timeout`` s for one); ``[]`` at EOF."""
        while not self.segments:
            if self.eof:
                return []
            w = self.waiter = self.loop.create_future()
            h = self.loop.call_later(timeout, _expire, w) if timeout is not None else None
            try:
                await w
            finally:
                self.waiter = None
                if h is not None:
                    h.cancel()
        out = self.segments
        self.segments = []
        return out

    async def write(self, data: bytes) -> None:
        await self.loop.sock_sendall(self.sock, data)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if not self.eof:
            self.loop.remove_reader(self.sock.fileno())
        self.sock.close()


_READ_SIZE = 1 << 18
_SO_TIMESTAMPNS = 35
"""Linux ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``; Python's socket module does not name it): receive
stamps as a ``struct timespec`` of ``CLOCK_REALTIME`` in a control message of every ``recvmsg``."""
_TIMESPEC = struct.Struct("@qq")


def _enable_rx_stamps(sock: socket.socket) -> bool:
    if not sys.platform.startswith("linux") or struct.calcsize("@l") != 8:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _arrival(anc: list[tuple[int, int, bytes]]) -> float:
    """The read's kernel receive time on the ``perf_counter`` clock (now, without a usable stamp)."""
    now = perf_counter()
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            age = time.time() - (float(sec) + float(nsec) * 1e-9)
            # a stamp from the future or older than a minute means the wall clock stepped: not usable
            if 0.0 <= age < 60.0:
                return now - age
    return now


def _expire(w: asyncio.Future[None]) -> None:
    if not w.done():
        w.set_exception(TimeoutError())


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
    """The response body, one piece per network read; :attr:`arrival` is the arrival time of the read the
    piece last yielded came from (the client reads it through ``response.extensions["sskj_arrival"]``)."""

    def __init__(
        self, owner: LeanTransport, conn: _Conn, mode: str, length: int, first: tuple[bytes, float], keep: bool
    ) -> None:
        self.owner = owner
        self.conn = conn
        self.mode = mode  # "chunked" | "length" | "close"
        self.left = length
        self.first = first
        self.keep = keep
        self.complete = False
        self.released = False
        self.arrival = first[1]
        self._dechunk = _Dechunker() if mode == "chunked" else None

    def _take(self, data: bytes) -> bytes:
        """The payload bytes of one read; sets :attr:`complete` at the body's end."""
        if self._dechunk is not None:
            piece = self._dechunk.feed(data)
            self.complete = self._dechunk.done
            return piece
        if self.mode == "length":
            piece = data[: self.left]
            self.left -= len(piece)
            self.complete = self.left <= 0
            return piece
        return data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self.conn
        timeout = self.owner.read_timeout
        segments = [self.first] if self.first[0] else []
        self.first = (b"", self.first[1])
        if self.mode == "length" and self.left <= 0:
            self.complete = True
            return
        while True:
            for data, arrival in segments:
                piece = self._take(data)
                if piece:
                    self.arrival = arrival
                    yield piece
                if self.complete:
                    return
            try:
                segments = await conn.read(timeout)
            except TimeoutError:
                raise httpx.ReadTimeout(f"no data for {timeout} s while reading the response body") from None
            if not segments:
                if self.mode == "close":
                    self.complete = True
                    self.keep = False
                    return
                what = "incomplete chunked read" if self._dechunk is not None else f"{self.left} bytes missing"
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
            sock = await asyncio.wait_for(_dial(loop, key), self.connect_timeout)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {key[0]}:{key[1]} timed out", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(f"{exc}", request=request) from None
        conn = _Conn(key, sock, loop)
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
                try:
                    await conn.write(wire)
                    return await self._response(conn, request)
                except (_StaleConnection, ConnectionError):
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
        buf = b""
        arrival = 0.0
        while True:
            try:
                segments = await conn.read(self.read_timeout)
            except TimeoutError:
                conn.close()
                raise httpx.ReadTimeout(f"no response head within {self.read_timeout} s", request=request) from None
            if not segments:
                if not buf:
                    raise _StaleConnection()
                raise httpx.RemoteProtocolError("connection closed inside the response head", request=request)
            buf += b"".join(d for d, _ in segments)
            arrival = segments[-1][1]
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
        stream = _Body(self, conn, mode, length, (rest, arrival), keep)
        ext: dict[str, Any] = {"http_version": version, "sskj_arrival": stream}
        return httpx.Response(status, headers=headers, stream=stream, extensions=ext)

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()


def _literal_address(key: tuple[str, int]) -> list[tuple[Any, Any, int, str, Any]] | None:
    """A literal IPv4/IPv6 host needs no resolver (``getaddrinfo`` in the executor cost 0.27-0.54 ms
    inside TTFT): its one address, or ``None`` for a host name."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(key[0].strip("[]"))
    except ValueError:
        return None
    if ip.version == 4:
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (str(ip), key[1]))]
    return [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (str(ip), key[1], 0, 0))]


async def _dial(loop: asyncio.AbstractEventLoop, key: tuple[str, int]) -> socket.socket:
    """A connected non-blocking TCP socket to ``key`` (every resolved address in turn, like
    ``loop.create_connection``), with Nagle off."""
    infos = _literal_address(key) or await loop.getaddrinfo(key[0], key[1], type=socket.SOCK_STREAM)
    errors: list[OSError] = []
    for family, kind, proto, _, addr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    if len(errors) == 1:
        raise errors[0]
    raise OSError(f"could not connect to {key[0]}:{key[1]}: " + "; ".join(map(str, errors)))


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before any response byte."""
