"""The lean HTTP/1.1 transport: chunked decoding under any split, pooling, errors mapped onto httpx's."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_sskj.bench.transport import LeanTransport, _Dechunker
from pytest_sskj.testing.mock_server import MockServer


def chunked(parts: list[bytes], trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts if p) + b"0\r\n" + trailer + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
    st.booleans(),
)
def test_dechunker_any_split_gives_the_payload(parts: list[bytes], cuts: list[int], trailer: bool) -> None:
    wire = chunked(parts, b"X-Trailer: 1\r\n" if trailer else b"")
    d = _Dechunker()
    got = b""
    prev = 0
    for c in sorted({c % (len(wire) + 1) for c in cuts}):
        got += d.feed(wire[prev:c])
        prev = c
    got += d.feed(wire[prev:])
    assert got == b"".join(parts), "payload bytes (which may contain CRLF) must survive any split"
    assert d.done, "the terminating zero chunk must be recognised"


def test_dechunker_accepts_chunk_extensions_and_rejects_garbage() -> None:
    assert _Dechunker().feed(b"3;name=v\r\nabc\r\n0\r\n\r\n") == b"abc"
    with pytest.raises(httpx.RemoteProtocolError, match="bad chunk size"):
        _Dechunker().feed(b"zz\r\nabc\r\n")


def test_pool_reuses_connections_and_bodies_of_every_framing_work() -> None:
    async def main() -> None:
        with MockServer() as srv:
            t = LeanTransport(2, read_timeout=10)
            async with httpx.AsyncClient(transport=t) as c:
                for _ in range(5):
                    r = await c.get(srv.url + "/v1/models")  # Content-Length body
                    assert r.status_code == 200 and r.json()["data"][0]["id"] == "mock-model"
                r = await c.post(srv.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 3, "stream": True})
                assert r.text.count("data: ") == 4 and r.text.endswith("data: [DONE]\n\n")  # chunked body
                assert len(t._all) == 1, f"sequential requests must share one connection, saw {len(t._all)}"

    asyncio.run(main())


def test_connection_refused_and_https_map_to_httpx_errors() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def main() -> None:
        async with httpx.AsyncClient(transport=LeanTransport(1)) as c:
            with pytest.raises(httpx.ConnectError):
                await c.get(f"http://127.0.0.1:{port}/health")
            with pytest.raises(httpx.UnsupportedProtocol):
                await c.get("https://127.0.0.1:1/health")

    asyncio.run(main())


def test_read_timeout_bounds_the_silence_between_reads() -> None:
    async def main() -> None:
        release = asyncio.Event()

        async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await r.readuntil(b"\r\n\r\n")
            await release.wait()  # say nothing until the client has given up
            w.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, httpx.AsyncClient(transport=LeanTransport(1, read_timeout=0.2)) as c:
            with pytest.raises(httpx.ReadTimeout):
                await c.get(f"http://127.0.0.1:{port}/")
            release.set()
            await asyncio.sleep(0.05)

    asyncio.run(main())


def test_a_keep_alive_connection_closed_by_the_server_is_replaced() -> None:
    async def main() -> None:
        served = 0

        async def one_shot(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            nonlocal served
            await r.readuntil(b"\r\n\r\n")
            served += 1
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await w.drain()
            w.close()  # no "Connection: close": the client finds out when it reuses the socket

        server = await asyncio.start_server(one_shot, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server, httpx.AsyncClient(transport=LeanTransport(1, read_timeout=5)) as c:
            for _ in range(3):
                r = await c.get(f"http://127.0.0.1:{port}/")
                assert r.text == "ok"
        assert served == 3

    asyncio.run(main())


def test_when_every_idle_connection_went_stale_the_retry_dials_a_fresh_one() -> None:
    """Both idle keep-alive connections are closed by the server when reused (its keep-alive limit): the
    retry must not take the second stale one, or the request fails with no response at all."""

    async def main() -> None:
        conns = 0

        async def server_side(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            nonlocal conns
            conns += 1
            first_two = conns <= 2
            try:
                await r.readuntil(b"\r\n\r\n")
                await asyncio.sleep(0.05)  # both first requests are in flight together: two connections
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await w.drain()
                if first_two:
                    await r.readuntil(b"\r\n\r\n")  # the reuse: close without a response
                    w.close()
                    return
                while True:
                    await r.readuntil(b"\r\n\r\n")
                    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await w.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                w.close()

        server = await asyncio.start_server(server_side, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/"
        async with server, httpx.AsyncClient(transport=LeanTransport(2, read_timeout=5)) as c:
            first = await asyncio.gather(c.get(url), c.get(url))
            assert [r.text for r in first] == ["ok", "ok"] and conns == 2
            r = await c.get(url)
            assert r.text == "ok", "the request must be answered on a fresh connection"
            assert conns == 3, f"expected exactly one new connection, saw {conns} in all"

    asyncio.run(main())


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="kernel receive stamps (SO_TIMESTAMPNS) are Linux-only"
)
def test_a_read_the_busy_loop_gets_to_late_keeps_its_kernel_arrival_time() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/stream"
    sent: dict[str, float] = {}

    def serve() -> None:
        c, _ = srv.accept()
        c.recv(65536)
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        time.sleep(0.05)
        sent["frame"] = time.perf_counter()
        c.sendall(b"5\r\nhello\r\n")
        time.sleep(0.6)
        c.sendall(b"0\r\n\r\n")
        c.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    got: list[tuple[bytes, float, float]] = []

    async def main() -> None:
        t = LeanTransport(1, read_timeout=10)
        async with httpx.AsyncClient(transport=t) as client, client.stream("GET", url) as resp:
            stamps = resp.extensions["sskj_arrival"]
            time.sleep(0.4)  # noqa: ASYNC251 -- the loop is busy elsewhere on purpose: the frame waits in the socket
            async for piece in resp.aiter_raw():
                got.append((piece, stamps.arrival, time.perf_counter()))

    asyncio.run(main())
    th.join(5)
    srv.close()
    assert got and got[0][0] == b"hello", f"expected the frame 'hello' first, got {got}"
    _, arrival, handed_up = got[0]
    assert abs(arrival - sent["frame"]) < 0.05, (
        f"the read must carry the time it arrived ({sent['frame']:.4f}), got {arrival:.4f} "
        f"({(arrival - sent['frame']) * 1000:.1f} ms off)"
    )
    assert handed_up - arrival > 0.25, f"the loop got to the read {handed_up - arrival:.3f} s after it arrived"
