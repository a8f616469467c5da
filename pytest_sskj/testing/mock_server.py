"""A scripted LLM streaming server on 127.0.0.1 for the bench client's tests and benchmarks.

Raw asyncio sockets speaking just enough HTTP/1.1 (keep-alive, ``Content-Length`` requests, chunked
SSE responses with one HTTP chunk per frame, as uvicorn sends them).  It serves SGLang's ``/generate``
(cumulative ``text``/``output_ids`` frames with ``meta_info``), OpenAI ``/v1/completions`` and
``/v1/chat/completions`` (usage in the finish chunk, or in a separate ``choices: []`` chunk), plus
``/flush_cache``, ``/server_info``, ``/health`` and ``/v1/models``.  Knobs (:class:`MockConfig`): time to
first frame, per-token inter-token latency, tokens per frame, and fault modes (:data:`FAULTS`) applied to
every ``fault_every``-th request.  With ``record_stamps`` it remembers the ``perf_counter`` time it
wrote every frame (``GET /_mock/stamps``), so a test on the same host can measure the client's timing
error exactly.  Run in a thread (:class:`MockServer`) or as its own process
(:func:`spawn_mock_server`, ``python -m pytest_sskj.testing.mock_server``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from pytest_sskj.rundir import atomic_write_text

__all__ = ["FAULTS", "MockConfig", "MockServer", "spawn_mock_server"]

FAULTS = (
    "none",
    "http_500",  # HTTP 500 with a JSON error body
    "truncated",  # the body ends in the middle of a frame (clean chunked end)
    "disconnect",  # the connection is dropped mid-stream (no chunked terminator)
    "bad_json",  # one frame is not JSON
    "bad_utf8",  # one frame is not UTF-8
    "zero_tokens",  # 200, frames with empty text only, then [DONE]
    "wrong_completion_tokens",  # server reports OSL - 1 completion tokens
    "wrong_prompt_tokens",  # server reports ISL + 1 prompt tokens
    "error_frame",  # an error frame mid-stream, then [DONE]
    "stop_early",  # finish_reason "stop" after half the tokens
    "no_done",  # no [DONE] and no finish reason: the stream just ends
)

_WORDS = ("the", "for", "this", "is", "over", "world")


@dataclass(frozen=True)
class MockConfig:
    """How the mock server behaves."""

    ttft_ms: float = 0.0
    """Delay from request received to the first content frame."""
    itl_ms: float = 0.0
    """Per-token inter-token latency: a frame of k tokens follows the previous one after k * itl_ms."""
    tokens_per_chunk: int = 1
    frames_per_write: int = 1
    """Content frames sent together in one socket write (> 1: the bytes of several steps reach the client in one
    segment, as from a server whose event loop fell behind; deterministic whatever the box's load)."""
    fault: str = "none"
    fault_every: int = 1
    """The fault hits requests number n (0-based, in arrival order) with n % fault_every == 0."""
    usage_chunk: str = "final"
    """OpenAI endpoints: ``final`` (usage in the finish chunk) or ``separate`` (own ``choices: []`` chunk)."""
    role_chunk: bool = True
    """Chat: send a role-only first chunk (no content) like OpenAI servers do."""
    offer_flush_cache: bool = True
    record_stamps: bool = False
    model: str = "mock-model"

    def __post_init__(self) -> None:
        if self.fault not in FAULTS:
            raise ValueError(f"unknown fault {self.fault!r}: choose one of {', '.join(FAULTS)}")
        if self.tokens_per_chunk < 1 or self.fault_every < 1 or self.frames_per_write < 1:
            raise ValueError("tokens_per_chunk, fault_every and frames_per_write must be >= 1")
        if self.usage_chunk not in ("final", "separate"):
            raise ValueError(f"usage_chunk must be 'final' or 'separate', got {self.usage_chunk!r}")


class _State:
    def __init__(self, config: MockConfig) -> None:
        self.config = config
        self.requests = 0
        self.flushes = 0
        self.stamps: list[dict[str, Any]] = []
        self.writers: set[asyncio.StreamWriter] = set()
        self.inflight = 0
        self.max_inflight = 0
        self.bodies: dict[tuple[str, int, int], bytes] = {}


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _frame(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


_DONE = b"data: [DONE]\n\n"


def _parse_request(path: str, body: dict[str, Any]) -> tuple[str, int, int, bool]:
    """(kind, isl, osl, ignore_eos) of a generation request."""
    if path == "/generate":
        sp = body.get("sampling_params") or {}
        return (
            "generate",
            len(body.get("input_ids") or []),
            int(sp.get("max_new_tokens", 128)),
            bool(sp.get("ignore_eos", False)),
        )
    if path == "/v1/completions":
        prompt = body.get("prompt")
        isl = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        return "completions", isl, int(body.get("max_tokens", 16)), bool(body.get("ignore_eos", False))
    msgs = body.get("messages") or []
    isl = sum(len(str(m.get("content", "")).split()) for m in msgs) + 4  # + a nominal chat template
    return "chat", isl, int(body.get("max_tokens", 16)), bool(body.get("ignore_eos", False))


def _key(path: str, body: dict[str, Any]) -> str:
    ids = body.get("input_ids") if path == "/generate" else body.get("prompt")
    if isinstance(ids, list):
        return ",".join(map(str, ids[:8]))
    return ""


class _Stream:
    """Builds the frames of one generation response."""

    def __init__(self, kind: str, isl: int, osl: int, fault: str, cfg: MockConfig, seq: int) -> None:
        self.kind, self.isl, self.osl, self.fault, self.cfg, self.seq = kind, isl, osl, fault, cfg, seq
        self.rid = f"mock-{seq}"
        n_out = osl if fault != "stop_early" else max(1, osl // 2)
        self.n_out = n_out
        self.reported_ct = n_out - 1 if fault == "wrong_completion_tokens" else n_out
        self.reported_pt = isl + 1 if fault == "wrong_prompt_tokens" else isl
        self.finish = "stop" if fault == "stop_early" else "length"

    def content_frames(self) -> list[tuple[int, bytes]]:
        """(cumulative tokens after the frame, frame bytes) for every content-bearing frame."""
        out: list[tuple[int, bytes]] = []
        k = self.cfg.tokens_per_chunk
        done = 0
        text = ""
        ids: list[int] = []
        while done < self.n_out:
            n = min(k, self.n_out - done)
            piece = "".join(" " + _WORDS[(done + j) % len(_WORDS)] for j in range(n))
            if self.fault == "zero_tokens":
                piece = ""
            done += n
            last = done >= self.n_out
            text += piece
            ids.extend(300 + ((done - n + j) % 200) for j in range(n))
            out.append((done, self._content_frame(piece, text, ids, done, last)))
        return out

    def _content_frame(self, piece: str, text: str, ids: list[int], done: int, last: bool) -> bytes:
        finish = self.finish if last and self.fault != "no_done" else None
        zero = self.fault == "zero_tokens"
        if self.kind == "generate":
            meta: dict[str, Any] = {
                "id": self.rid,
                "finish_reason": {"type": finish, "length": self.n_out} if finish else None,
                "prompt_tokens": self.reported_pt,
                "completion_tokens": 0 if zero else (self.reported_ct if last else done),
                "cached_tokens": 0,
            }
            return _frame({"text": text, "output_ids": [] if zero else list(ids), "meta_info": meta})
        usage = None
        if last and finish and self.cfg.usage_chunk == "final":
            usage = {
                "prompt_tokens": self.reported_pt,
                "completion_tokens": 0 if zero else self.reported_ct,
                "total_tokens": self.reported_pt + self.reported_ct,
            }
        if self.kind == "completions":
            obj: dict[str, Any] = {
                "id": self.rid,
                "object": "text_completion",
                "model": self.cfg.model,
                "choices": [{"index": 0, "text": piece, "finish_reason": finish}],
            }
        else:
            obj = {
                "id": self.rid,
                "object": "chat.completion.chunk",
                "model": self.cfg.model,
                "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}],
            }
        if usage is not None:
            obj["usage"] = usage
        return _frame(obj)

    def head_frames(self) -> list[bytes]:
        if self.kind == "chat" and self.cfg.role_chunk:
            return [
                _frame(
                    {
                        "id": self.rid,
                        "object": "chat.completion.chunk",
                        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
                    }
                )
            ]
        return []

    def tail_frames(self) -> list[bytes]:
        out = []
        if self.kind != "generate" and self.cfg.usage_chunk == "separate" and self.fault != "no_done":
            ct = 0 if self.fault == "zero_tokens" else self.reported_ct
            out.append(
                _frame(
                    {
                        "id": self.rid,
                        "object": "usage",
                        "choices": [],
                        "usage": {"prompt_tokens": self.reported_pt, "completion_tokens": ct},
                    }
                )
            )
        if self.fault != "no_done":
            out.append(_DONE)
        return out


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path.split("?", 1)[0], body


def _plain(status: int, obj: Any) -> bytes:
    body = json.dumps(obj).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


async def _generate(state: _State, path: str, body: bytes, writer: asyncio.StreamWriter, t_recv: float) -> bool:
    """Serve one generation request; return False when the connection must be closed."""
    cfg = state.config
    seq = state.requests
    state.requests += 1
    fault = cfg.fault if seq % cfg.fault_every == 0 else "none"
    try:
        req = json.loads(body)
        kind, isl, osl, _ = _parse_request(path, req)
    except (ValueError, TypeError, AttributeError) as exc:
        writer.write(_plain(400, {"error": {"message": f"bad request body: {exc}"}}))
        return True
    if fault == "http_500":
        writer.write(_plain(500, {"error": {"message": "mock: internal error", "type": "server_error"}}))
        return True
    zero_delay = cfg.ttft_ms <= 0 and cfg.itl_ms <= 0 and not cfg.record_stamps
    if zero_delay and fault == "none":
        # The ingest benchmark's server: the whole answer is built once per shape and written at once,
        # so the server costs next to nothing and the client is what gets measured.
        writer.write(_whole_answer(state, kind, isl, osl))
        return True
    writes: list[list[float]] = []
    if cfg.record_stamps:
        state.stamps.append({"key": _key(path, req), "t_recv": t_recv, "writes": writes})
    stream = _Stream(kind, isl, osl, fault, cfg, seq)
    return await _write_stream(writer, stream, fault, cfg, t_recv, writes, drain=not zero_delay)


def _whole_answer(state: _State, kind: str, isl: int, osl: int) -> bytes:
    """The complete fault-free chunked SSE response of one shape, built on first use and kept."""
    cached = state.bodies.get((kind, isl, osl))
    if cached is None:
        st = _Stream(kind, isl, osl, "none", state.config, 0)
        frames = [*st.head_frames(), *(f for _, f in st.content_frames()), *st.tail_frames()]
        cached = state.bodies[(kind, isl, osl)] = _SSE_HEAD + b"".join(map(_chunk, frames)) + b"0\r\n\r\n"
    return cached


async def _write_stream(
    writer: asyncio.StreamWriter,
    stream: _Stream,
    fault: str,
    cfg: MockConfig,
    t_recv: float,
    writes: list[list[float]],
    *,
    drain: bool,
) -> bool:
    """Head frames, the content frames paced by TTFT and ITL (a fault strikes at the middle one), tail frames;
    the write time of each content frame goes to ``writes`` with ``record_stamps``."""
    content = stream.content_frames()
    writer.write(_SSE_HEAD)
    for f in stream.head_frames():
        writer.write(_chunk(f))
    first_cum = content[0][0] if content else 0
    pending: list[bytes] = []
    for j, (cum, frame) in enumerate(content):
        due = t_recv + (cfg.ttft_ms + (cum - first_cum) * cfg.itl_ms) / 1000.0
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if j == len(content) // 2 and fault != "none":
            writer.write(b"".join(pending))
            pending.clear()
            ended = await _mid_stream_fault(fault, frame, writer)
            if ended is not None:
                return ended
        t = time.perf_counter()
        pending.append(_chunk(frame))
        if cfg.record_stamps:
            writes.append([cum, t])
        if len(pending) >= cfg.frames_per_write or j == len(content) - 1:
            writer.write(b"".join(pending))
            pending.clear()
            if drain:
                await writer.drain()
    for f in stream.tail_frames():
        writer.write(_chunk(f))
    writer.write(b"0\r\n\r\n")
    return True


async def _mid_stream_fault(fault: str, frame: bytes, writer: asyncio.StreamWriter) -> bool | None:
    """The fault at the middle content frame: ``True``/``False`` when it ends the response (``False``: the
    connection is dropped), ``None`` when the stream goes on (after a bad frame for ``bad_json``/``bad_utf8``)."""
    if fault in ("truncated", "disconnect"):
        writer.write(_chunk(frame[: len(frame) // 2]))
        if fault == "disconnect":
            await writer.drain()
            return False
        writer.write(b"0\r\n\r\n")
        return True
    if fault == "bad_json":
        writer.write(_chunk(b'data: {"choices": [{"text": "x"\n\n'))
    if fault == "bad_utf8":
        writer.write(_chunk(b'data: {"text": "\xff\xfe"}\n\n'))
    if fault == "error_frame":
        err = {"error": {"message": "mock: engine failure", "type": "invalid_request_error", "code": 500}}
        writer.write(_chunk(_frame(err)) + _chunk(_DONE) + b"0\r\n\r\n")
        return True
    return None


async def _handle(state: _State, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    cfg = state.config
    state.writers.add(writer)
    try:
        while True:
            req = await _read_request(reader)
            if req is None:
                break
            t_recv = time.perf_counter()
            method, path, body = req
            keep = True
            if path in ("/generate", "/v1/completions", "/v1/chat/completions") and method == "POST":
                state.inflight += 1
                state.max_inflight = max(state.max_inflight, state.inflight)
                try:
                    keep = await _generate(state, path, body, writer, t_recv)
                    await writer.drain()
                finally:
                    state.inflight -= 1
            elif path == "/flush_cache":
                if cfg.offer_flush_cache:
                    state.flushes += 1
                    writer.write(_plain(200, {"message": "Cache flushed."}))
                else:
                    writer.write(_plain(404, {"detail": "Not Found"}))
            elif path == "/health":
                writer.write(_plain(200, {"status": "ok"}))
            elif path == "/server_info":
                writer.write(_plain(200, {"mock": True, **asdict(cfg)}))
            elif path == "/v1/models":
                writer.write(_plain(200, {"object": "list", "data": [{"id": cfg.model, "object": "model"}]}))
            elif path == "/_mock/state":
                writer.write(
                    _plain(
                        200, {"requests": state.requests, "flushes": state.flushes, "max_inflight": state.max_inflight}
                    )
                )
            elif path == "/_mock/stamps":
                writer.write(_plain(200, {"requests": state.stamps}))
            else:
                writer.write(_plain(404, {"detail": "Not Found"}))
            await writer.drain()
            if not keep:
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        state.writers.discard(writer)
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


class _Running:
    """What a started server exposes to the thread or process that started it."""

    def __init__(self, config: MockConfig) -> None:
        self.state = _State(config)
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None


async def _serve(running: _Running, port: int, ready: threading.Event | asyncio.Event) -> None:
    state = running.state
    server = await asyncio.start_server(lambda r, w: _handle(state, r, w), "127.0.0.1", port, limit=1 << 24)
    running.port = server.sockets[0].getsockname()[1]
    running.loop = asyncio.get_running_loop()
    running.stopping = stopping = asyncio.Event()
    ready.set()
    async with server:
        await stopping.wait()
        server.close()
        for w in list(state.writers):  # handlers see EOF and return on their own (no task cancelling)
            w.transport.abort()
        await asyncio.sleep(0)


class MockServer:
    """The mock server on a background thread: ``with MockServer(MockConfig(ttft_ms=5)) as srv: srv.url``."""

    def __init__(self, config: MockConfig | None = None) -> None:
        self.config = config or MockConfig()
        self._thread: threading.Thread | None = None
        self._running = _Running(self.config)

    @property
    def url(self) -> str:
        if not self._running.port:
            raise RuntimeError("MockServer is not started; use 'with MockServer(...) as srv'")
        return f"http://127.0.0.1:{self._running.port}"

    @property
    def requests_served(self) -> int:
        """Generation requests received so far."""
        return self._running.state.requests

    @property
    def max_inflight(self) -> int:
        """Most generation requests in flight at once so far."""
        return self._running.state.max_inflight

    @property
    def flushes(self) -> int:
        """Successful ``/flush_cache`` calls so far."""
        return self._running.state.flushes

    def start(self) -> MockServer:
        if self._thread is not None:
            raise RuntimeError("MockServer already started")
        ready = threading.Event()
        self._thread = threading.Thread(
            target=lambda: asyncio.run(_serve(self._running, 0, ready)), name="sskj-mock-server", daemon=True
        )
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("mock server did not start within 10 s")
        return self

    def stop(self) -> None:
        r = self._running
        if self._thread is None or r.loop is None or r.stopping is None:
            return
        r.loop.call_soon_threadsafe(r.stopping.set)
        self._thread.join(10)
        self._thread = None

    def __enter__(self) -> MockServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def spawn_mock_server(config: MockConfig, log_dir: Path, *, cpu: int | None = None) -> Iterator[str]:
    """Run the mock server as its own process (own session, log file, optional CPU pin); yield its URL."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port_file = log_dir / f"mock-{os.getpid()}-{time.perf_counter_ns()}.port"
    argv = [
        sys.executable,
        "-m",
        "pytest_sskj.testing.mock_server",
        "--port-file",
        str(port_file),
        "--config",
        json.dumps(asdict(config)),
    ]
    if cpu is not None:
        argv += ["--cpu", str(cpu)]
    with (log_dir / "mock_server.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None:
                raise RuntimeError(f"mock server exited with {proc.returncode}; see {log_dir / 'mock_server.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mock server did not write {port_file} within 20 s")
            time.sleep(0.02)
        yield f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
        port_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="pytest-sskj scripted SSE mock server")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", type=Path)
    ap.add_argument("--config", default="{}", help="MockConfig fields as JSON")
    ap.add_argument("--cpu", type=int, help="pin this process to one CPU")
    a = ap.parse_args(argv)
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    known = {f.name for f in fields(MockConfig)}
    cfg = replace(MockConfig(), **{k: v for k, v in json.loads(a.config).items() if k in known})
    running = _Running(cfg)

    async def run() -> None:
        ready = asyncio.Event()
        task = asyncio.ensure_future(_serve(running, a.port, ready))
        waiter = asyncio.ensure_future(ready.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            await task  # start-up failed: raise its error
        stopping = running.stopping
        assert stopping is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        if a.port_file is not None:
            atomic_write_text(a.port_file, str(running.port))
        sys.stdout.write(f"mock server listening on http://127.0.0.1:{running.port}\n")
        sys.stdout.flush()
        await task

    asyncio.run(run())


if __name__ == "__main__":
    main()
