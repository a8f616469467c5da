"""The max-context-length probe (issue 48, item 2): the search against a server with a known limit, the option's
schema, the plan and the verdict.  The server here is a small HTTP double that refuses prompts as vLLM 0.32 does
(HTTP 400, its own message), runs out of memory or slows down past stated lengths, or stops answering; the real
engines' limits are checked end to end in ``test_context_engines.py`` (slow)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pytest_sskj.acceptance import context
from pytest_sskj.acceptance.context_probe import classify, search
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"


@dataclass
class Limits:
    """How the double behaves: a prompt of ``>= limit`` tokens is refused (vLLM's message); ``advertised`` is what
    ``/v1/models`` says (``None``: no such field); prompts of ``>= oom_at`` tokens fail out of memory, of
    ``>= slow_at`` tokens take ``slow_s``; after ``die_after`` requests the server closes every connection."""

    limit: int
    advertised: int | None = None
    oom_at: int | None = None
    slow_at: int | None = None
    slow_s: float = 0.3
    die_after: int | None = None


@contextmanager
def double(lim: Limits) -> Iterator[tuple[str, list[int]]]:
    seen: list[int] = []

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            entry: dict[str, Any] = {"id": "m"}
            if lim.advertised is not None:
                entry["max_model_len"] = lim.advertised
            self._send(200, {"data": [entry]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            n = len(body["prompt"])
            seen.append(n)
            if lim.die_after is not None and len(seen) > lim.die_after:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if n >= lim.limit:
                msg = (
                    f"This model's maximum context length is {lim.limit} tokens. However, your prompt contains {n} "
                    "input tokens, which exceeds this limit even without any output tokens."
                )
                self._send(400, {"error": {"message": msg, "type": "BadRequestError", "code": 400}})
                return
            if lim.oom_at is not None and n >= lim.oom_at:
                self._send(500, {"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB"}})
                return
            if lim.slow_at is not None and n >= lim.slow_at:
                time.sleep(lim.slow_s)
            self._send(200, {"choices": [{"text": "x", "token_ids": [7]}]})

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", seen
    finally:
        srv.shutdown()
        srv.server_close()


def _search(url: str, lo: int = 16, hi: int = 65536, **kw: Any) -> Any:
    return search(url, "openai-token-ids", lo, hi, model="m", timeout_s=10.0, **kw)


def test_a_server_that_behaves_as_it_advertises_is_settled_in_four_probes() -> None:
    with double(Limits(limit=5000, advertised=5000)) as (url, seen):
        got = _search(url)
    assert got.largest == 4999 and got.settled and got.stopped is None, got
    assert seen == [16, 65536, 4999, 5000], f"expected LO, HI, then the advertised limit's two sides, saw {seen}"
    bad = got.first_failed
    assert bad.isl == 5000 and bad.outcome == "rejected" and bad.status == 400, bad
    assert "maximum context length is 5000 tokens" in bad.message, "the server's own message is kept"
    assert (got.advertised, got.advertised_from) == (5000, "/v1/models max_model_len")


@pytest.mark.parametrize("advertised", [None, 8192, 100], ids=["none", "too-high", "too-low"])
def test_without_a_true_advertised_limit_the_bisection_finds_it_to_one_token(advertised: int | None) -> None:
    with double(Limits(limit=3001, advertised=advertised)) as (url, seen):
        got = _search(url, max_probes=context.probe_limit(16, 65536))
    assert got.largest == 3000 and got.first_failed.isl == 3001 and got.settled, [
        (p.isl, p.outcome) for p in got.probes
    ]
    assert len(seen) <= 4 + math.ceil(math.log2(65536 - 16)), f"{len(seen)} probes: {seen}"
    for p in got.probes:  # every probe kept, each consistent with the server's rule
        assert (p.outcome == "accepted") == (p.isl < 3001), p


def test_out_of_memory_and_a_slow_prefill_end_the_served_range_with_their_own_outcomes() -> None:
    with double(Limits(limit=10_000, advertised=10_000, oom_at=6000)) as (url, _):
        oom = _search(url)
    assert oom.largest == 5999 and oom.first_failed.outcome == "oom", [(p.isl, p.outcome) for p in oom.probes]
    assert "CUDA out of memory" in oom.first_failed.message
    # a slow prefill: 0.8 s past 700 tokens against a 400 ms bound (wide margins: the suite runs on a busy box)
    with double(Limits(limit=10_000, advertised=10_000, slow_at=700, slow_s=0.8)) as (url, _):
        slow = _search(url, lo=16, hi=1024, ttft_limit_ms=400.0)
    assert slow.largest == 699 and slow.first_failed.outcome == "over_slo", [(p.isl, p.outcome) for p in slow.probes]
    assert "over the SLO's 400 ms TTFT" in slow.first_failed.message


def test_the_floor_unserved_the_ceiling_served_and_a_server_that_goes_away() -> None:
    with double(Limits(limit=100)) as (url, seen):
        low = _search(url, lo=128, hi=4096)
    assert low.largest is None and low.settled and seen == [128], "LO refused: nothing more to ask"
    with double(Limits(limit=100_000, advertised=100_000)) as (url, seen):
        high = _search(url, lo=128, hi=4096)
    assert high.largest == 4096 and high.settled and seen == [128, 4096], "HI served: at least HI"
    with double(Limits(limit=50_000, die_after=3)) as (url, seen):
        gone = _search(url, lo=16, hi=65536)
    assert gone.stopped is not None and "stopped answering" in gone.stopped, gone
    assert gone.probes[-1].outcome == "gone" and not gone.settled and len(seen) == 4


@pytest.mark.parametrize(
    ("status", "body", "elapsed", "limit", "outcome"),
    [
        (200, "{}", 50.0, None, "accepted"),
        (200, "{}", 50.0, 10.0, "over_slo"),
        (400, '{"error": {"message": "request (256 tokens) exceeds the available context size"}}', 5.0, None,
         "rejected"),
        (500, '{"error": "Prefill out of memory. Try to lower your batch size."}', 5.0, None, "oom"),
        (503, "busy", 5.0, None, "error"),
    ],
)  # fmt: skip
def test_each_answer_is_classified_with_the_servers_own_words(
    status: int, body: str, elapsed: float, limit: float | None, outcome: str
) -> None:
    got, msg = classify(status, body, elapsed, limit)
    assert got == outcome, (got, msg)
    if status == 400:
        assert msg == "request (256 tokens) exceeds the available context size", msg


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*args).stash[SETTINGS_KEY]


def test_the_option_the_keys_and_the_plan(pytester: pytest.Pytester) -> None:
    s = _settings(pytester, "--backend", "parallel,q8_0", "--concurrency", "8", "--sskj-max-context", "1K:256K",
                  "--sskj-slo", "p95_ttft_ms<3000,p95_tpot_ms<50")  # fmt: skip
    assert s.max_context == (1024, 262144) and list(s.as_dict()["max_context"]) == [1024, 262144]
    assert [k.id for k in context.keys(s)] == ["parallel-ctx", "q8_0-ctx"]
    assert context.ttft_limit_ms(s) == 3000.0
    (line,) = context.dry_run_lines(s)
    assert "ISL 1024..262144 by bisection, at most 22 probes" in line and "TTFT bound 3000 ms" in line, line
    assert "parallel-chunk512-c8-r1" in line or "asked on parallel-" in line, line
    none = _settings(pytester)
    assert none.max_context is None and context.keys(none) == []
    assert "--sskj-max-context 1K:256K" in str(context.not_applicable(none, context.PARAM, None))


@pytest.mark.parametrize(
    ("value", "says"),
    [("4K:1K", "must be below HI"), ("1K", "is not LO:HI"), ("1K:2K:4K", "is not LO:HI"), ("x:4K", "is not a size"),
     ("1K:20M", "the longest context of any model")],
)  # fmt: skip
def test_bad_bounds_are_a_usage_error_before_anything_runs(pytester: pytest.Pytester, value: str, says: str) -> None:
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest_inprocess("--sskj-max-context", value, "--reports-dir", str(pytester.path / "r"),
                                       "-p", "no:cacheprovider")  # fmt: skip
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR and says in err and "accepted:" in err, err
    assert not (pytester.path / "r").exists(), "nothing may be written before the options are accepted"


def test_without_bounds_the_probe_test_is_deselected_with_its_reason(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest_inprocess(str(ACCEPTANCE), "--co", "-q", "-p", "no:cacheprovider")
    assert "test_max_context.py::" not in res.stdout.str(), res.stdout.str()
    res = pytester.runpytest_inprocess(str(ACCEPTANCE), "--co", "-q", "-p", "no:cacheprovider",
                                       "--sskj-max-context", "16:4K", "--backend", "parallel")  # fmt: skip
    assert "acceptance/test_max_context.py::test_max_context[parallel-ctx]" in res.stdout.str(), res.stdout.str()


def _stored(tmp: Path, probes: list[tuple[int, str, str]], stopped: str | None = None) -> Path:
    ps = [{"isl": n, "outcome": o, "status": 400 if o == "rejected" else 200, "message": m, "elapsed_ms": 1.0}
          for n, o, m in probes]  # fmt: skip
    ok = [p["isl"] for p in ps if p["outcome"] == "accepted"]
    d = {"lo": probes[0][0], "hi": 65536, "probes": ps, "largest": max(ok) if ok else None, "settled": True,
         "stopped": stopped, "advertised": 4096, "advertised_from": "/props n_ctx", "wall_s": 0.1}  # fmt: skip
    (tmp / context.FILE).write_text(json.dumps(d))
    return tmp


def test_the_verdict_says_the_largest_input_and_what_refused_the_next(
    tmp_path: Path, pytester: pytest.Pytester
) -> None:
    s = _settings(pytester, "--backend", "parallel", "--sskj-max-context", "16:64K")
    from pytest_sskj.acceptance.accuracy import host_point

    key, host = context.keys(s)[0], host_point(s, "parallel", None)
    found = context.verdict(key, host, _stored(tmp_path, [(16, "accepted", ""), (65536, "rejected", "too long"),
                                                          (4095, "accepted", ""), (4096, "rejected", "too long")]),
                            "absent")  # fmt: skip
    assert found["passed"] and found["largest_isl"] == 4095 and found["outcome"] == "found", found
    assert "largest input served within the SLO 4095 tokens; 4096 tokens: rejected (too long)" in found["message"]
    floor = context.verdict(key, host, _stored(tmp_path, [(16, "oom", "CUDA out of memory")]), "absent")
    assert floor["passed"] is False and floor["outcome"] == "below_floor" and "CUDA out of memory" in floor["message"]
    gone = context.verdict(key, host, _stored(tmp_path, [(16, "accepted", ""), (65536, "gone", "x")], "went away"),
                           "absent")  # fmt: skip
    assert gone["passed"] is None and "search unfinished" in gone["message"], gone
    empty = tmp_path / "empty"
    empty.mkdir()
    assert context.verdict(key, host, empty, "no server")["message"] == "no server"
