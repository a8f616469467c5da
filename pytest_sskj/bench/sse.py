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
unfinished event were left over (a truncated stream).  All complete events of one read are decoded with
one UTF-8 decode and one split (the per-event Python work is a prefix check and a slice), because at
high token rates the client's core is the limit.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DONE", "SSEEvent", "SSEParser"]

DONE = "[DONE]"
"""The data payload OpenAI-style servers (and SGLang ``/generate``) send as the last event."""

_new_event = tuple.__new__  # builds an SSEEvent without NamedTuple's Python-level __new__


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
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self._buf = buf
            return []
        self._buf = buf[cut + 2 :]
        complete = buf[:cut]
        try:
            text = complete.decode("utf-8")  # every complete event of this read in one call
        except UnicodeDecodeError:
            return self._blocks_one_by_one(complete)
        out: list[SSEEvent] = []
        new = _new_event
        for block in text.split("\n\n"):
            # Fast path: one `data: ` line, the shape every LLM server sends.
            if block.startswith("data: ") and "\n" not in block:
                out.append(new(SSEEvent, (block[6:], None)))
            elif block:
                ev = self._parse_block(block)
                if ev is not None:
                    out.append(ev)
        self.events += len(out)
        if (out and out[-1].data == DONE) or any(ev.data == DONE for ev in out):
            self.done = True
        return out

    def _blocks_one_by_one(self, complete: bytes) -> list[SSEEvent]:
        """Slow path for a read holding invalid UTF-8: decode event by event, skip (and note) bad ones."""
        out: list[SSEEvent] = []
        for raw in complete.split(b"\n\n"):
            if not raw:
                continue
            try:
                block = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.invalid.append(f"SSE frame is not valid UTF-8 ({exc.reason} at byte {exc.start}): {raw[:120]!r}")
                continue
            ev = self._parse_block(block)
            if ev is not None:
                out.append(ev)
        self.events += len(out)
        if any(ev.data == DONE for ev in out):
            self.done = True
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

    def _parse_block(self, block: str) -> SSEEvent | None:
        data_lines: list[str] = []
        event: str | None = None
        for raw in block.split("\n"):
            if not raw:
                continue
            if raw[0] == ":":  # comment / keep-alive
                self.comments += 1
                continue
            name, sep, value = raw.partition(":")
            if sep and value[:1] == " ":
                value = value[1:]
            if name == "data":
                data_lines.append(value)
            elif name == "event":
                event = value
            # id / retry / unknown fields: ignored, as the SSE rules say.
        if not data_lines:
            return None  # comments only, or fields without data: nothing to dispatch
        return SSEEvent("\n".join(data_lines), event)
