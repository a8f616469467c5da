"""Incremental Server-Sent-Events parser fed raw bytes as they come off the socket.

The parser owns the wire format only (WHATWG "event stream" rules, as servers use them for LLM
streaming): it accepts any split of the byte stream (a frame, a line, even a multi-byte UTF-8
character may be cut between two reads), ``\\n``, ``\\r\\n`` and ``\\r`` line endings, ``:`` comment
lines (keep-alive pings), multi-line ``data:`` fields, ``event:`` names and the ``[DONE]`` sentinel.
It never decodes JSON and never looks at tokens: that is the endpoint adapters' job
(:mod:`pytest_sskj.bench.endpoints`).  Bytes are kept as bytes until a whole event is complete, so a
UTF-8 character split across reads is decoded once both halves are there; a frame that is not valid
UTF-8 is skipped and described in :attr:`SSEParser.invalid` (the parser never raises on input, so a
malformed stream cannot stop the run).  At end of stream :meth:`SSEParser.close` says whether bytes of an
unfinished event were left over (a truncated stream).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DONE", "SSEEvent", "SSEParser"]

DONE = "[DONE]"
"""The data payload OpenAI-style servers (and SGLang ``/generate``) send as the last event."""

_DATA_PREFIX = b"data: "


class SSEEvent(NamedTuple):
    """One dispatched event: its ``data`` (lines joined with ``\\n``) and its ``event`` name, if any."""

    data: str
    event: str | None = None


class SSEParser:
    """Turns a byte stream into :class:`SSEEvent` s, one :meth:`feed` call per network read.

    >>> p = SSEParser()
    >>> p.feed(b'data: {"a"') + p.feed(b': 1}\\n\\ndata: [DONE]\\n\\n')
    [SSEEvent(data='{"a": 1}', event=None), SSEEvent(data='[DONE]', event=None)]
    """

    __slots__ = ("_buf", "_pending_cr", "bytes_fed", "comments", "done", "events", "invalid")

    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False
        self.bytes_fed = 0
        """Total bytes fed so far."""
        self.events = 0
        """Events dispatched so far (``[DONE]`` included)."""
        self.comments = 0
        """Comment lines (``:`` keep-alive pings) skipped so far."""
        self.done = False
        """Whether a ``[DONE]`` event has been seen."""
        self.invalid: list[str] = []
        """One message per skipped frame that was not valid UTF-8."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Add bytes; return every event they complete (possibly none)."""
        if not chunk:
            return []
        self.bytes_fed += len(chunk)
        if self._pending_cr:  # a CRLF split between two reads: the LF belongs to the CR already seen
            self._pending_cr = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._pending_cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        out: list[SSEEvent] = []
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            start = end + 2
            if not block:
                continue
            # Fast path: one `data: ` line, the shape every LLM server sends.
            try:
                if block.startswith(_DATA_PREFIX) and b"\n" not in block:
                    ev = SSEEvent(block[6:].decode("utf-8"))
                else:
                    parsed = self._parse_block(block)
                    if parsed is None:
                        continue
                    ev = parsed
            except UnicodeDecodeError as exc:
                self.invalid.append(f"SSE frame is not valid UTF-8 ({exc.reason} at byte {exc.start}): {block[:120]!r}")
                continue
            self.events += 1
            if ev.data == DONE:
                self.done = True
            out.append(ev)
        self._buf = buf[start:] if start < len(buf) else b""
        return out

    def close(self) -> bytes:
        """End of stream: return the bytes of an unfinished event (empty when the stream ended cleanly).

        A final event not followed by a blank line is *not* dispatched (SSE rules); callers treat
        leftover bytes as a truncated stream.
        """
        rest = self._buf.strip(b"\n")
        self._buf = b""
        if all(line[:1] == b":" for line in rest.split(b"\n")):
            return b""  # only a keep-alive comment was pending
        return rest

    def _parse_block(self, block: bytes) -> SSEEvent | None:
        data_lines: list[str] = []
        event: str | None = None
        for raw in block.split(b"\n"):
            if not raw:
                continue
            if raw[0] == 0x3A:  # b":" comment / keep-alive
                self.comments += 1
                continue
            name, sep, value = raw.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                data_lines.append(value.decode("utf-8"))
            elif name == b"event":
                event = value.decode("utf-8")
            # id / retry / unknown fields: ignored, as the SSE rules say.
        if not data_lines:
            return None  # comments only, or fields without data: nothing to dispatch
        return SSEEvent("\n".join(data_lines), event)
