"""Readiness: wait for the HTTP-serving rank(s) to answer their health endpoint before a deadline.

Health is judged where it means something (domain.md §8.2-8.3): on the engine's ``health_path`` of the
HTTP-serving ranks (multi-node ranks >= 1 that only run a dummy server are judged by process state and
their logs only).  While waiting,
every rank's process is polled and every log is scanned: a rank that exits, or a fatal log signature,
fails the wait at once with the exit code and the last log lines (:class:`ServerLaunchError`); the
deadline (``time.perf_counter``) raises :class:`HealthTimeout` with the same evidence.  URLs may be
known up front or discovered from a log line (the embedded server binds port 0 and prints its address).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_sskj.engines import get_engine
from pytest_sskj.errors import HealthTimeout, ServerLaunchError
from pytest_sskj.server.embedded import ADDRESS_PATTERN
from pytest_sskj.server.launcher import ProcessHandle
from pytest_sskj.server.logscan import LogOracle
from pytest_sskj.server.process import describe_exit, tail_lines

__all__ = ["HealthReport", "address_from_log", "probe", "wait_healthy"]

_ADDRESS = ADDRESS_PATTERN

UrlSource = Callable[[], "str | None"]


def address_from_log(log_path: Path, offset: int = 0, pattern: re.Pattern[str] = _ADDRESS) -> str | None:
    """The base URL a server printed into its log after byte ``offset`` (the last one), or ``None``.

    The embedded server prints ``sskj-embedded: listening on http://HOST:PORT`` once it is bound.
    """
    try:
        with log_path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read(1024 * 1024).decode("utf-8", errors="replace")
    except OSError:
        return None
    found = pattern.findall(text)
    return str(found[-1]).rstrip("/") if found else None


@dataclass(frozen=True)
class HealthReport:
    """How a successful wait went."""

    urls: tuple[str, ...]
    elapsed_s: float
    probes: int


def probe(url: str, path: str, timeout_s: float = 5.0) -> tuple[int | None, str]:
    """``(status, detail)`` of one GET ``url + path``; status ``None`` when nothing answered."""
    import httpx

    from pytest_sskj.httpopts import client_options

    try:  # (several probes a second while a server loads: no certificate store built for plain http)
        r = httpx.get(url.rstrip("/") + path, timeout=timeout_s, **client_options(url))
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return r.status_code, r.text[:200]


def _died(handles: Sequence[ProcessHandle]) -> ProcessHandle | None:
    for h in handles:
        if h.poll() is not None:
            return h
    return None


def _evidence(handles: Sequence[ProcessHandle], n: int = 15) -> str:
    parts = []
    for h in handles:
        tail = tail_lines(h.log_path, n)
        body = "\n".join(f"    | {line}" for line in tail) or "    | (log is empty)"
        parts.append(f"  {h.node} rank {h.rank} (log {h.log_path}), last {len(tail)} lines:\n{body}")
    return "\n".join(parts)


def wait_healthy(
    engine: str,
    handles: Sequence[ProcessHandle],
    urls: Sequence[str | UrlSource],
    *,
    timeout_s: float,
    oracle: LogOracle | None = None,
    poll_s: float = 0.01,
    max_poll_s: float = 0.25,
    fast_s: float = 1.0,
    probe_timeout_s: float = 5.0,
    label: str = "server",
) -> HealthReport:
    """Block until every URL in ``urls`` answers 200 on the engine's health path, or fail fast.

    ``handles`` are all ranks (or replicas); ``urls`` the HTTP-serving ones (a string, or a callable that
    returns the URL once the server has printed it).  Raises :class:`ServerLaunchError` when a rank exits
    or a fatal log signature appears first, :class:`HealthTimeout` when ``timeout_s`` passes.

    Polled every ``poll_s`` (10 ms) for the first ``fast_s`` (a cheap engine is healthy 100-150 ms after its spawn
    here, and the next measured phase waits for it: a growing interval from the start found it 50-100 ms late, at
    every one of a run's server starts; a poll reads the log, or sends one GET, ~0.2 ms), then at
    an interval growing by half up to ``max_poll_s``.  Until the server has printed its address nothing is
    sent: the poll only reads its log.
    """
    path = get_engine(engine).health_path
    start = time.perf_counter()
    deadline = start + timeout_s
    resolved: list[str | None] = [u if isinstance(u, str) else None for u in urls]
    healthy = [False] * len(urls)
    last: list[str] = ["not probed yet"] * len(urls)
    probes = 0
    interval = poll_s
    while True:
        _refuse_dead(engine, label, handles, oracle, start)
        for i, src in enumerate(urls):
            if healthy[i]:
                continue
            if resolved[i] is None and callable(src):
                resolved[i] = src()
            url = resolved[i]
            if url is None:
                last[i] = "the server has not printed its address yet"
                continue
            status, detail = probe(url, path, min(probe_timeout_s, max(0.1, deadline - time.perf_counter())))
            probes += 1
            healthy[i] = status == 200
            last[i] = f"HTTP {status}: {detail}" if status is not None else detail
        if all(healthy):
            return HealthReport(tuple(u for u in resolved if u), time.perf_counter() - start, probes)
        now = time.perf_counter()
        if now >= deadline:
            waiting = [
                f"{resolved[i] or '(address unknown)'}{path}: {last[i]}" for i in range(len(urls)) if not healthy[i]
            ]
            raise HealthTimeout(
                f"{label}: no healthy answer within {timeout_s:g} s from "
                + "; ".join(waiting)
                + f"\n{_evidence(handles)}\n  Hint: raise --sskj-health-timeout if the model loads slowly, "
                "or read the logs above for the cause"
            )
        time.sleep(min(interval, max(0.0, deadline - now)))
        if now - start >= fast_s:  # a slow start (a real model loading) is polled less and less often
            interval = min(max_poll_s, interval * 1.5)


def _refuse_dead(
    engine: str, label: str, handles: Sequence[ProcessHandle], oracle: LogOracle | None, start: float
) -> None:
    """Raise :class:`ServerLaunchError` when a rank exited or a fatal log signature appeared before health."""
    dead = _died(handles)
    if dead is not None:
        others = [h for h in handles if h is not dead]
        msg = describe_exit(f"{label}: {dead.node} rank {dead.rank}", dead.poll(), dead.log_path)
        if oracle is not None:
            fatal = oracle.fatal(oracle.scan(final=True)) or oracle.fatal()
            if fatal:
                msg += "\n  log oracle: " + "; ".join(f.describe() for f in fatal[:3])
        raise ServerLaunchError(
            f"{msg}\n  it exited before {engine} became healthy "
            f"({time.perf_counter() - start:.1f} s after launch)"
            + (f"; other ranks:\n{_evidence(others, 5)}" if others else "")
        )
    if oracle is not None:
        fatal = oracle.fatal(oracle.scan())
        if fatal:
            f = fatal[0]
            raise ServerLaunchError(
                f"{label}: fatal log signature on {f.node} rank {f.rank} before the server became healthy "
                f"({f.category}: {f.line})\n  excerpt ({f.path}:{f.line_no}):\n"
                + "\n".join(f"    | {line}" for line in f.excerpt.splitlines())
            )
