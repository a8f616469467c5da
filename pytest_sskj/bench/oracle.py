"""The strict per-request success oracle: what "40/40 requests OK" means.

A request passes only if all of these hold, checked in this order (the first that fails is the reason):

1. it got an answer at all (no connect/read error) and HTTP 200;
2. no error frame and no protocol error (bad JSON, invalid UTF-8, non-object frame) in the stream;
3. the stream ended properly: ``[DONE]`` seen, or a frame with a finish reason, and no truncated frame;
4. at least one content token arrived;
5. the server reported ``completion_tokens`` and, with ``ignore_eos``, it equals the requested OSL
   (without ``ignore_eos`` it must be between 1 and the OSL);
6. the client saw no more content tokens than the server reports (exact-token endpoints: as many);
7. where the prompt was sent as token ids and the server reports ``prompt_tokens``, it equals the ISL;
8. the finish reason is ``length`` with ``ignore_eos`` (``length`` or ``stop`` without it).

Every reason is a sentence naming the expected and the seen value.  Server (peer) clients count a 200
with no tokens as success; this oracle does not.
"""

from __future__ import annotations

from pytest_sskj.bench.records import RequestRecord

__all__ = ["judge"]


def judge(rec: RequestRecord, *, exact_tokens: bool) -> str | None:
    """Return None when ``rec`` passes the oracle, else the reason; also stores it in ``rec.failure``."""
    rec.failure = _reason(rec, exact_tokens=exact_tokens)
    return rec.failure


def _reason(rec: RequestRecord, *, exact_tokens: bool) -> str | None:
    """The first rule ``rec`` breaks, in the module docstring's order."""
    reason = _transport_reason(rec)
    if reason is None:
        reason = _stream_reason(rec)
    if reason is None:
        reason = _token_count_reason(rec, exact_tokens=exact_tokens)
    if reason is None:
        reason = _prompt_and_finish_reason(rec)
    return reason


def _transport_reason(rec: RequestRecord) -> str | None:
    """Rules 1-2: an answer, HTTP 200, no error or protocol error."""
    if rec.http_status is None:
        return f"no HTTP response: {rec.error or 'unknown transport error'}"
    if rec.http_status != 200:
        return rec.error or f"HTTP {rec.http_status}"
    return rec.error


def _stream_reason(rec: RequestRecord) -> str | None:
    """Rules 3-4: the stream ended properly and carried at least one content token."""
    if not rec.done_seen and rec.finish_reason is None:
        return f"stream ended without [DONE] or a finish reason after {rec.frames} frames (truncated stream)"
    if rec.tokens_counted == 0:
        return (
            f"HTTP 200 but no content token arrived ({rec.frames} frames, server completion_tokens="
            f"{rec.completion_tokens})"
        )
    return None


def _token_count_reason(rec: RequestRecord, *, exact_tokens: bool) -> str | None:
    """Rules 5-6: the server's completion_tokens against the OSL and the client's own count."""
    counted, ct = rec.tokens_counted, rec.completion_tokens
    if ct is None:
        return "server reported no completion_tokens (usage / meta_info missing)"
    if rec.ignore_eos and ct != rec.osl:
        return f"completion_tokens {ct} != requested OSL {rec.osl} (ignore_eos)"
    if not rec.ignore_eos and not 1 <= ct <= rec.osl:
        return f"completion_tokens {ct} outside [1, {rec.osl}]"
    if counted > ct or (exact_tokens and counted != ct):
        return f"client counted {counted} content tokens but the server reports completion_tokens {ct}"
    return None


def _prompt_and_finish_reason(rec: RequestRecord) -> str | None:
    """Rules 7-8: the prompt tokens sent as ids, and the finish reason."""
    if rec.exact_prompt and rec.prompt_tokens is not None and rec.prompt_tokens != rec.isl:
        return f"server prompt_tokens {rec.prompt_tokens} != ISL {rec.isl} sent as token ids"
    allowed = ("length",) if rec.ignore_eos else ("length", "stop")
    if rec.finish_reason not in allowed:
        return f"finish_reason {rec.finish_reason!r}, expected {' or '.join(map(repr, allowed))}"
    return None
