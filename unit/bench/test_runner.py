"""The runner against the scripted server: records on disk, cache flush, warmup, concurrency, repeats."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_sskj.bench import BenchClient, Workload, arun_bench, load_records, run_bench, run_repeats
from pytest_sskj.bench.endpoints import get_endpoint
from pytest_sskj.bench.records import RequestRecord
from pytest_sskj.bench.saturation import SaturationThresholds
from pytest_sskj.testing.mock_server import MockConfig, MockServer

W = Workload(isl=32, osl=4, requests=12, concurrency=4, warmup=2)


def test_records_are_on_disk_as_each_request_finishes(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    path = tmp_path / "requests.jsonl"

    def progress(done: int, total: int) -> None:
        lines = path.read_text().splitlines()
        seen.append((done, len(lines)))

    with MockServer(MockConfig(ttft_ms=3, itl_ms=1)) as srv:
        r = run_bench(srv.url, W, tmp_path, label="pt", progress=progress)
    assert r.ok, r.failures
    # records are written by the sink's writer thread (a blocking disk write must not stall the client's loop):
    # on disk while the run goes on, never ahead of the requests, every one of them when the run returns
    assert all(lines <= 2 + done for done, lines in seen), f"more lines than finished requests: {seen}"
    assert any(lines > 2 for _, lines in seen[:-1]), f"no measured line reached the disk during the run: {seen}"
    assert len(path.read_text().splitlines()) == 14, "expected 2 warmup + 12 measured lines after the run"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert sum(x["warmup"] for x in rows) == 2 and all(x["label"] == "pt" and x["ok"] for x in rows)
    back = load_records(path)
    assert back[-1].chunk_times and back[-1].t_send is not None and back[-1].completion_tokens == 4
    assert (tmp_path / "result-r0.json").exists()


def test_a_warmup_sent_before_is_recorded_not_sent_again_and_the_measured_prompts_stay_the_same(
    tmp_path: Path,
) -> None:
    """``run_warmup`` sends exactly the repeat's warmup requests (on a prepared server, before the bench);
    the bench given them (``warmed``) writes them to its file and sends only the measured ones; ``warmed=[]``
    (a server warm from an earlier measured phase) sends none.  The plan is the same in every case: the
    measured prompts keep their numbers and ids, so an A/B still compares identical prompts."""
    from pytest_sskj.bench import run_warmup

    with MockServer() as srv:
        sent = run_bench(srv.url, W, tmp_path / "sent", repeat=1)
        before = srv.requests_served
        warm = run_warmup(srv.url, W, repeat=1, label="early")
        assert srv.requests_served - before == 2, "run_warmup sends the repeat's 2 warmup requests, no more"
        given = run_bench(srv.url, W, tmp_path / "given", repeat=1, warmed=warm)
        assert srv.requests_served - before == 2 + 12, "the bench given the warmup sends the 12 measured ones only"
        none = run_bench(srv.url, W, tmp_path / "none", repeat=1, warmed=[])
    assert [r.index for r in warm] == [0, 1] and all(r.warmup and r.ok for r in warm), warm
    assert given.ok and none.ok, (given.failures, none.failures)
    assert (len(given.warmup_records), given.metrics["warmup"], none.metrics["warmup"]) == (2, 2, 0)
    rows = {k: [json.loads(x) for x in (tmp_path / k / "requests.jsonl").read_text().splitlines()]
            for k in ("sent", "given", "none")}  # fmt: skip
    assert sorted(x["index"] for x in rows["given"]) == sorted(x["index"] for x in rows["sent"]) == list(range(14))
    assert sorted(x["index"] for x in rows["none"]) == list(range(2, 14)), "no warmup line when none was sent"
    assert [r.index for r in sent.records] == [r.index for r in given.records] == [r.index for r in none.records]


def test_warmup_is_sent_but_not_measured(tmp_path: Path) -> None:
    with MockServer() as srv:
        r = run_bench(srv.url, W, tmp_path)
        served = srv.requests_served
    assert served == 14, f"2 warmup + 12 measured requests should reach the server, {served} did"
    assert r.metrics["requests"] == 12 and len(r.warmup_records) == 2 and r.metrics["warmup_failed"] == 0
    assert {x.osl for x in r.warmup_records} == {4}


def test_cache_is_flushed_where_offered_and_a_404_is_recorded_quietly(tmp_path: Path) -> None:
    with MockServer() as srv:
        r = run_bench(srv.url, W, tmp_path / "a")
        assert srv.flushes == 1
        assert r.cache_flush == {srv.url: "flushed"}
    with MockServer(MockConfig(offer_flush_cache=False)) as srv:
        r = run_bench(srv.url, W, tmp_path / "b")
        assert r.cache_flush == {srv.url: "unsupported (HTTP 404)"}
        assert r.ok, "a server without /flush_cache must not fail the run"
    with MockServer() as srv:
        run_bench(srv.url, W, tmp_path / "c", flush_cache=False)
        assert srv.flushes == 0


def test_concurrency_limit_is_held_and_reached(tmp_path: Path) -> None:
    with MockServer(MockConfig(ttft_ms=30, itl_ms=2)) as srv:
        r = run_bench(srv.url, replace(W, requests=16, warmup=0), tmp_path)
        peak = srv.max_inflight
    assert r.ok, r.failures
    assert peak == 4, f"concurrency 4: the server saw at most {peak} requests in flight"
    assert r.metrics["concurrency"] is not None and 2.0 < float(r.metrics["concurrency"]) <= 4.0


def test_poisson_rate_spreads_the_sends(tmp_path: Path) -> None:
    w = replace(W, requests=10, warmup=0, concurrency=10, request_rate=50.0)
    with MockServer() as srv:
        r = run_bench(srv.url, w, tmp_path)
    sends = sorted(x.t_send for x in r.records if x.t_send is not None)
    assert sends[-1] - sends[0] > 0.05, "10 requests at 50/s cannot all go at once"


def test_sixteen_k_token_prompts_do_not_choke(tmp_path: Path) -> None:
    w = Workload(isl=16384, osl=2, requests=16, concurrency=8, warmup=0, endpoint="generate")
    with MockServer() as srv:
        r = run_bench(srv.url, w, tmp_path)
    assert r.ok, r.failures
    assert {x.prompt_tokens for x in r.records} == {16384}


def test_multi_token_frames_are_split_per_token(tmp_path: Path) -> None:
    w = Workload(isl=8, osl=9, requests=2, concurrency=2, warmup=0, endpoint="generate")
    with MockServer(MockConfig(tokens_per_chunk=3, itl_ms=15)) as srv:
        r = run_bench(srv.url, w, tmp_path)
    assert r.ok, r.failures
    counts = [x.chunk_tokens for x in r.records]  # frames that arrive in one read share it: [3, 6] is fine
    assert all(sum(c) == 9 and all(n % 3 == 0 for n in c) for c in counts), counts
    assert len(r.samples("itl")) == 2 * 6, "6 ITL samples per request: the tokens after the first frame"


def test_repeats_give_fresh_prompts_and_a_median_with_spread(tmp_path: Path) -> None:
    with MockServer(MockConfig(ttft_ms=2)) as srv:
        rr = run_repeats(srv.url, replace(W, requests=4, warmup=0), tmp_path, 3)
        assert srv.flushes == 3, "the cache must be flushed before every repeat"
    assert rr.ok and [r.repeat for r in rr.results] == [0, 1, 2]
    assert rr.median["completed"] == 4
    assert rr.median["p95_ttft_ms"] is not None and "p95_ttft_ms" in rr.spread
    assert rr.spread["p95_ttft_ms"]["min"] <= rr.median["p95_ttft_ms"] <= rr.spread["p95_ttft_ms"]["max"]
    rows = load_records(tmp_path / "requests.jsonl")
    assert sorted({x.repeat for x in rows}) == [0, 1, 2]


def test_a_blocked_event_loop_marks_the_run_client_bound(tmp_path: Path) -> None:
    async def main() -> object:
        stop = False

        async def hog() -> None:
            while not stop:
                time.sleep(0.02)  # noqa: ASYNC251 - blocks the loop on purpose
                await asyncio.sleep(0)

        task = asyncio.create_task(hog())
        try:
            with MockServer(MockConfig(ttft_ms=5, itl_ms=5)) as srv:
                return await arun_bench(
                    srv.url, replace(W, warmup=0, osl=8), tmp_path, thresholds=SaturationThresholds(loop_lag_ms=5.0)
                )
        finally:
            stop = True
            await task

    r = asyncio.run(main())
    assert r.client_bound, f"a 20 ms loop stall must be detected: {r.client_evidence}"  # type: ignore[attr-defined]
    ev = r.client_evidence  # type: ignore[attr-defined]
    assert ev["loop_lag_p90_ms"] > 5.0 and any("event-loop lag" in x for x in ev["reasons"])
    assert r.metrics["client_bound"] is True  # type: ignore[attr-defined]


def test_client_lifecycle_misuse_raises_clear_errors() -> None:
    async def main() -> None:
        c = BenchClient(2)
        rec = RequestRecord(index=0, warmup=False, repeat=0, url="http://x", endpoint="generate", isl=1, osl=1)
        with pytest.raises(RuntimeError, match="not opened yet"):
            await c.stream_request("http://127.0.0.1:1", get_endpoint("generate"), b"{}", rec)
        async with c:
            with pytest.raises(RuntimeError, match="already open"):
                await c.open()
        with pytest.raises(RuntimeError, match="Cannot reopen"):
            await c.open()

    asyncio.run(main())


def test_sync_run_bench_inside_a_loop_points_to_arun_bench(tmp_path: Path) -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="await arun_bench"):
            run_bench("http://127.0.0.1:1", W, tmp_path)

    asyncio.run(main())


def test_fixtures_run_a_point_from_the_session_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_sskj.testing.mock_server import MockServer

        def test_point(bench_client, run_bench):
            w = bench_client.workload(requests=5, concurrency=2, isl=16, osl=3)
            assert (w.warmup, w.seed, w.endpoint) == (1, 42, "completions")
            with MockServer() as srv:
                r = run_bench(srv.url, w, label="p1")
            assert r.ok, r.failures
            assert r.metrics["completed"] == 5
            assert (r.out_dir / "requests.jsonl").exists()
            assert "bench" in r.out_dir.parts and r.out_dir.name == "p1"
        """
    )
    res = pytester.runpytest("-p", "no:cacheprovider", f"--reports-dir={pytester.path / 'reports'}")
    res.assert_outcomes(passed=1)
