"""The max-context-length probe, the client side (issue 48, item 2): the largest input length a running server
accepts and serves within its SLO, found by bisection between stated bounds, every probe's outcome kept.

One probe is one greedy, non-streaming request of exactly ``isl`` prompt token ids and ``osl`` output tokens (1 by
default) in the engine's token-id dialect (:mod:`pytest_sskj.acceptance.agreement_dialects`), so the prompt's
length is exact whatever the tokenizer.  Its outcome:

* ``accepted``: HTTP 200 with at least one generated token, answered within the TTFT limit (if any);
* ``over_slo``: HTTP 200, but slower than the TTFT limit (the SLO's TTFT bound applies to the one request);
* ``rejected``: HTTP 4xx -- the server's own message is kept (vLLM "This model's maximum context length is N
  tokens", sglang "The input (P tokens) is longer than the model's context length", llama.cpp
  ``exceed_context_size_error``);
* ``oom``: an answer (any status) whose body names an out-of-memory error;
* ``timeout``: no answer within the probe's timeout;
* ``error``: any other answer; ``gone``: the server stopped answering at all (the search stops there).

The search assumes a monotone server (if ``n`` tokens fail, more fail too).  It probes ``lo`` (the stated floor:
when it fails there is no answer), then ``hi``, then -- when the server advertises a limit ``L`` (``/v1/models``
``max_model_len`` on vLLM and SGLang, llama.cpp's ``/props`` per-slot ``n_ctx``) -- ``L - 1`` and ``L``, which
settle a server that behaves as it says in four probes; then it bisects what is left, to one token.

The interface: :class:`ContextProbe`, :class:`ContextSearch`, :func:`search`, :func:`advertised_limit`,
:func:`classify`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sskj.acceptance.agreement_dialects import Dialect

__all__ = ["OUTCOMES", "ContextProbe", "ContextSearch", "advertised_limit", "classify", "search"]

OUTCOMES = ("accepted", "over_slo", "rejected", "oom", "timeout", "error", "gone")
"""Every probe outcome (only ``accepted`` counts as served within the SLO)."""

METHOD_VERSION = "max-context-1"
_OOM = re.compile(r"out of memory|OutOfMemory|\bOOM\b", re.IGNORECASE)
_VOCAB = (300, 500)  # the agreement probes' token-id range: ordinary tokens of every tokenizer we serve


@dataclass(frozen=True)
class ContextProbe:
    """One request of ``isl`` prompt tokens and what came of it."""

    isl: int
    outcome: str
    status: int | None
    message: str
    """The server's own words for a refusal or error (the first 300 characters), else a short description."""
    elapsed_ms: float | None
    """Wall time from sending to the complete answer (with one output token: the time to first token)."""


@dataclass
class ContextSearch:
    """A whole search: the bounds, the advertised limit, every probe in order, and the answer."""

    lo: int
    hi: int
    osl: int
    ttft_limit_ms: float | None
    advertised: int | None = None
    advertised_from: str | None = None
    probes: list[ContextProbe] = field(default_factory=list)
    stopped: str | None = None
    """Why the search ended before it was settled to one token (the server went away), else ``None``."""
    wall_s: float = 0.0

    @property
    def largest(self) -> int | None:
        """The largest ISL served within the SLO (``None``: not even ``lo``)."""
        ok = [p.isl for p in self.probes if p.outcome == "accepted"]
        return max(ok) if ok else None

    @property
    def first_failed(self) -> ContextProbe | None:
        """The smallest ISL that was not served within the SLO (``None``: every probe was)."""
        bad = [p for p in self.probes if p.outcome != "accepted"]
        return min(bad, key=lambda p: p.isl) if bad else None

    @property
    def settled(self) -> bool:
        """Whether the answer is exact: ``hi`` served, or the first failure lies one token above the largest."""
        big, bad = self.largest, self.first_failed
        if big is None:
            return bad is not None and bad.isl == self.lo
        return big == self.hi or (bad is not None and bad.isl == big + 1)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(method=METHOD_VERSION, largest=self.largest, settled=self.settled)
        return d


def classify(status: int | None, body: str, elapsed_ms: float | None, ttft_limit_ms: float | None) -> tuple[str, str]:
    """``(outcome, message)`` of one answer (``status`` ``None``: there was none; see the module text)."""
    text = _message(body)
    if status is None:
        return "error", text
    if _OOM.search(body):
        return "oom", text
    if status == 200:
        if ttft_limit_ms is not None and elapsed_ms is not None and elapsed_ms > ttft_limit_ms:
            return "over_slo", f"served in {elapsed_ms:.0f} ms, over the SLO's {ttft_limit_ms:g} ms TTFT"
        return "accepted", f"served in {elapsed_ms:.0f} ms" if elapsed_ms is not None else "served"
    if 400 <= status < 500:
        return "rejected", text
    return "error", f"HTTP {status}: {text}"


def _message(body: str) -> str:
    """The server's own message in an error body (OpenAI / sglang / llama.cpp ``error.message``), else the text."""
    import json

    try:
        d = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    err = d.get("error") if isinstance(d, dict) else None
    msg = err.get("message") if isinstance(err, dict) else (err if isinstance(err, str) else None)
    if msg is None and isinstance(d, dict):
        msg = d.get("message") or d.get("detail")
    return str(msg if msg is not None else body.strip())[:300]


def advertised_limit(client: Any, base: str) -> tuple[int | None, str | None]:
    """The context length the server says it has and where it said so: ``/v1/models`` ``data[0].max_model_len``
    (vLLM, SGLang), else llama.cpp's ``/props`` ``default_generation_settings.n_ctx`` (per slot)."""
    import httpx

    picks: tuple[tuple[str, Callable[[Any], Any]], ...] = (
        ("/v1/models", lambda d: (d.get("data") or [{}])[0].get("max_model_len")),
        ("/props", lambda d: (d.get("default_generation_settings") or {}).get("n_ctx")),
    )
    for path, pick in picks:
        try:
            r = client.get(base + path)
            value = pick(r.json()) if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError, IndexError, TypeError):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, f"{path} {'max_model_len' if path == '/v1/models' else 'n_ctx'}"
    return None, None


def _prompt(isl: int, seed: int) -> list[int]:
    import numpy as np

    rng = np.random.default_rng([seed, isl])
    return [int(x) for x in rng.integers(*_VOCAB, size=isl)]


def _one(
    client: Any, url: str, body: dict[str, Any], d: Dialect, ttft_limit_ms: float | None, isl: int
) -> ContextProbe:
    import httpx

    t0 = time.perf_counter()
    try:
        r = client.post(url, json=body)
        elapsed = (time.perf_counter() - t0) * 1000.0
        outcome, msg = classify(r.status_code, r.text, elapsed, ttft_limit_ms)
        if outcome in ("accepted", "over_slo"):
            try:
                if not d.tokens(r.json()):
                    raise ValueError("no token was generated")
            except ValueError as exc:  # a 200 that carries no generated token is no served request
                outcome, msg = "error", f"HTTP 200 without a generated token: {exc}"[:300]
        return ContextProbe(isl, outcome, r.status_code, msg, round(elapsed, 3))
    except httpx.TimeoutException as exc:
        return ContextProbe(isl, "timeout", None, f"no answer within the probe's timeout ({type(exc).__name__})", None)
    except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError) as exc:
        return ContextProbe(isl, "gone", None, f"the server stopped answering: {type(exc).__name__}: {exc}", None)
    except httpx.HTTPError as exc:
        return ContextProbe(isl, "error", None, f"{type(exc).__name__}: {exc}", None)


def search(
    url: str,
    dialect_name: str,
    lo: int,
    hi: int,
    *,
    osl: int = 1,
    ttft_limit_ms: float | None = None,
    timeout_s: float = 300.0,
    model: str | None = None,
    seed: int = 0,
    max_probes: int = 64,
) -> ContextSearch:
    """Find the largest ISL in ``[lo, hi]`` that ``url`` serves within the SLO (see the module text)."""
    import httpx

    from pytest_sskj.acceptance.agreement_dialects import dialect
    from pytest_sskj.accuracy.client import served_model
    from pytest_sskj.httpopts import client_options

    d = dialect(dialect_name)
    base = url.rstrip("/")
    out = ContextSearch(lo, hi, osl, ttft_limit_ms)
    t0 = time.perf_counter()
    with httpx.Client(timeout=timeout_s, **client_options(base)) as client:
        out.advertised, out.advertised_from = advertised_limit(client, base)
        if dialect_name == "openai-token-ids" and not model:
            model = served_model(client, base)

        def probe(n: int) -> ContextProbe:
            p = _one(client, base + d.path, d.body(_prompt(n, seed), osl, seed, model), d, ttft_limit_ms, n)
            out.probes.append(p)
            return p

        _bisect(out, probe, max_probes)
    out.wall_s = round(time.perf_counter() - t0, 3)
    return out


def _bisect(out: ContextSearch, probe: Callable[[int], ContextProbe], max_probes: int) -> None:
    """Probe ``lo``, ``hi``, the advertised limit's two sides, then halve ``(good, bad)`` to one token."""
    first = probe(out.lo)
    if first.outcome != "accepted":
        out.stopped = first.message if first.outcome == "gone" else None
        return
    good, bad = out.lo, None
    if out.hi > out.lo:
        last = probe(out.hi)
        if last.outcome == "accepted":
            return
        if last.outcome == "gone":
            out.stopped = last.message
            return
        bad = out.hi
    hints = [] if out.advertised is None else [out.advertised - 1, out.advertised]
    while bad is not None and bad - good > 1 and len(out.probes) < max_probes:
        inside = [h for h in hints if good < h < bad]
        n = inside.pop(0) if inside else (good + bad) // 2
        hints = inside
        p = probe(n)
        if p.outcome == "gone":
            out.stopped = p.message
            return
        if p.outcome == "accepted":
            good = n
        else:
            bad = n
    if bad is not None and bad - good > 1:
        out.stopped = f"stopped after {len(out.probes)} probes with {good} served and {bad} not"
