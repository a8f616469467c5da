"""Servers that stall, for the hang tests: one accepts a request and never answers, one drips a byte a second.

Both read the whole HTTP request first (head and ``Content-Length`` body), then hang: the drip sends a 200 with a
chunked SSE body of one-byte comments (``:``) forever, bytes that carry no token.  :func:`serve` runs a handler on
127.0.0.1 in a thread of its own and yields the base URL; leaving it cancels every open connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

__all__ = ["Handler", "drips", "never_answers", "read_request", "serve"]

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]


async def read_request(reader: asyncio.StreamReader) -> None:
    """Read one HTTP request: its head and its ``Content-Length`` body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(x.split(b":")[1]) for x in head.split(b"\r\n") if x.lower().startswith(b"content-length")), 0)
    await reader.readexactly(length)


async def never_answers(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await read_request(reader)
        await asyncio.sleep(3600)


async def drips(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"1\r\n:\r\n")  # one byte of an SSE comment per second: bytes, never a token
            await writer.drain()
            await asyncio.sleep(1.0)


@contextlib.contextmanager
def serve(handler: Handler) -> Iterator[str]:
    """Run ``handler`` on 127.0.0.1 (a free port) in its own event-loop thread; yield ``http://127.0.0.1:PORT``."""
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()

    async def start() -> asyncio.Server:
        return await asyncio.start_server(handler, "127.0.0.1", 0)

    srv = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    finally:

        async def stop() -> None:
            srv.close()
            others = [x for x in asyncio.all_tasks() if x is not asyncio.current_task()]
            for x in others:
                x.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()
