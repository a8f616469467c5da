"""Per-request records: raw ``perf_counter`` stamps and what the server said, one JSON line each.

A :class:`RequestRecord` is filled by the timing loop (:mod:`pytest_sskj.bench.client`) and judged by
the oracle (:mod:`pytest_sskj.bench.oracle`); metrics (:mod:`pytest_sskj.bench.metrics`) are derived from
records only.  Stamps are raw ``time.perf_counter()`` seconds (``t_send`` just before the request is
written, ``chunk_times[k]`` when network read ``k`` carrying ``chunk_tokens[k]`` new content tokens
arrived, ``t_end`` when the stream ended).  :class:`RecordSink` appends each record to
``requests.jsonl`` as the request finishes and flushes the line, so a run that dies loses nothing
already finished.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["RecordSink", "RequestRecord", "load_records"]


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request."""

    index: int
    warmup: bool
    repeat: int
    url: str
    endpoint: str
    isl: int
    """Prompt tokens sent (client side)."""
    osl: int
    """Output tokens requested."""
    ignore_eos: bool = True
    exact_prompt: bool = True
    t_scheduled: float | None = None
    """When the request was allowed to go (arrival time reached and a concurrency slot free)."""
    t_send: float | None = None
    t_first: float | None = None
    """Arrival of the first read that carried a content token."""
    t_end: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    http_status: int | None = None
    frames: int = 0
    bytes_received: int = 0
    done_seen: bool = False
    prompt_tokens: int | None = None
    """Server-reported prompt tokens (None when the server did not say)."""
    completion_tokens: int | None = None
    """Server-reported completion tokens (None when the server did not say)."""
    finish_reason: str | None = None
    spec: tuple[int, int, int] | None = None
    """Server-reported speculative counts of this request: verify steps, accepted and proposed draft tokens
    (SGLang's per-request ``meta_info``; None when the server reports none)."""
    error: str | None = None
    """Transport or protocol error seen by the client (first one)."""
    failure: str | None = None
    """The oracle's verdict: None when the request passed, else the reason."""

    @property
    def tokens_counted(self) -> int:
        """Content tokens the client saw arrive."""
        return sum(self.chunk_tokens)

    @property
    def output_tokens(self) -> int:
        """Output length used by the metrics: the server's count when reported, else the client's."""
        return self.completion_tokens if self.completion_tokens is not None else self.tokens_counted

    @property
    def input_tokens(self) -> int:
        """Input length used by the metrics: the server's count when reported, else the client's."""
        return self.prompt_tokens if self.prompt_tokens is not None else self.isl

    @property
    def ok(self) -> bool:
        return self.failure is None

    def set_error(self, message: str) -> None:
        """Keep the first error (later ones are usually consequences of it)."""
        if self.error is None:
            self.error = message

    def to_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies the stamp lists, which costs more than the request
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        return cls(**d)


class RecordSink:
    """Appends records to a JSONL file, one flushed line per finished request.

    The line is built on the caller's thread (the client's event loop) but written and flushed by a
    writer thread: a ``write()`` that blocks on a busy disk (dirty-page throttling on a shared box held
    the loop for ~270 ms, three times in one measured phase) must not stall the client that takes the
    timestamps.  :meth:`close` drains the queue, so every record is on disk when the sink is closed.
    """

    def __init__(self, path: Path) -> None:
        import queue
        import threading

        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = path.open("a", encoding="utf-8")
        self.written = 0
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._writer = threading.Thread(target=self._drain, name=f"sskj-records-{path.parent.name}", daemon=True)
        self._writer.start()

    def _drain(self) -> None:
        fh = self._fh
        while True:
            line = self._queue.get()
            if line is None or fh is None:
                return
            try:
                fh.write(line)
                fh.flush()
            except OSError as exc:  # reported by close()
                self._error = exc

    def write(self, rec: RequestRecord, **extra: Any) -> None:
        if self._fh is None:
            raise RuntimeError(f"RecordSink for {self.path} is closed; open a new one")
        d = rec.to_dict()
        d["ok"] = rec.ok
        d.update(extra)
        self._queue.put(json.dumps(d, separators=(",", ":")) + "\n")
        self.written += 1

    def close(self) -> None:
        if self._fh is not None:
            self._queue.put(None)
            self._writer.join()
            self._fh.close()
            self._fh = None
            if self._error is not None:
                raise OSError(f"writing {self.path} failed: {self._error}") from self._error

    def __enter__(self) -> RecordSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_records(path: Path) -> list[RequestRecord]:
    """Read a ``requests.jsonl`` back (extra keys such as ``ok`` and ``label`` are dropped)."""
    names = set(RequestRecord.__dataclass_fields__)
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                d = json.loads(line)
                out.append(RequestRecord.from_dict({k: v for k, v in d.items() if k in names}))
    return out
