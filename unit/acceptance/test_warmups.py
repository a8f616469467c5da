"""Where a point's warmup is sent (pytest_sskj.acceptance.warmup): the prepared server's early warmup is used
only by the point it was sent for, on that very server; a server that ran a measured phase needs none."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_sskj.acceptance.warmup import Warmups
from pytest_sskj.bench.client import BenchTimeouts
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.workload import Workload


@dataclass(eq=False)
class _Server:
    urls: list[str] = field(default_factory=lambda: ["http://127.0.0.1:9"])
    external: bool = False


def _rec(ok: bool = True) -> RequestRecord:
    r = RequestRecord(index=0, warmup=True, repeat=1, url="u", endpoint="completions", isl=8, osl=4)
    if not ok:  # as the oracle judges a request that got an HTTP error
        r.set_error("HTTP 500")
        r.failure = "HTTP 500"
    return r


def _hook(monkeypatch: pytest.MonkeyPatch, records: list[RequestRecord]) -> tuple[Warmups, list[Any]]:
    sent: list[Any] = []

    def run_warmup(urls: list[str], workload: Workload, **kw: Any) -> list[RequestRecord]:
        sent.append((tuple(urls), kw["repeat"], kw["label"]))
        return records

    monkeypatch.setattr("pytest_sskj.bench.runner.run_warmup", run_warmup)
    return Warmups(), sent


def test_the_early_warmup_is_used_by_its_point_on_its_server_only(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = [_rec()]
    w, sent = _hook(monkeypatch, recs)
    prepared, other = _Server(), _Server()
    w.hook("p-r2", Workload(isl=8, osl=4, requests=4, concurrency=2), 2, BenchTimeouts())(prepared)
    assert sent == [(("http://127.0.0.1:9",), 2, "p-r2")], f"expected one warmup for p-r2 repeat 2, saw {sent}"
    assert w.done("p-r2", other) is None, "another server than the warmed one must send its own warmup"
    w.hook("p-r2", Workload(isl=8, osl=4, requests=4, concurrency=2), 2, BenchTimeouts())(prepared)
    assert w.done("p-r2", prepared) == recs, "the warmed server's point uses the records sent to it"
    assert w.done("p-r2", prepared) is None, "the records are used once"


def test_a_failed_early_warmup_is_not_used_and_a_benched_server_needs_none(monkeypatch: pytest.MonkeyPatch) -> None:
    w, _sent = _hook(monkeypatch, [_rec(ok=False)])
    server = _Server()
    w.hook("p-r1", Workload(isl=8, osl=4, requests=4, concurrency=2), 1, BenchTimeouts())(server)
    assert w.done("p-r1", server) is None, "a failed early warmup: the bench sends (and records) its own"
    w.benched(server)
    assert w.done("p-c2-search", server) == [], "a server that ran a measured phase is warm: no warmup sent"
    assert w.done("p-c2-search", _Server()) is None, "a fresh server is not"
    w2, sent2 = _hook(monkeypatch, [_rec()])
    w2.hook("x", Workload(isl=8, osl=4, requests=4, concurrency=2, warmup=0), 1, BenchTimeouts())(server)
    assert sent2 == [], "a workload without warmup sends nothing early"
