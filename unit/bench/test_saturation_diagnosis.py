"""The client-bound check also sees the longest stall (a p90 of 1 ms hid a 451 ms stall), tells a
saturated client (its own thread busy) from a starved one (lagging while idle: another process had its
core), and its advice fits: at C=1 it never says "lower --concurrency".  A literal IP is dialled
without the resolver."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from pytest_sskj.bench.runner import run_bench
from pytest_sskj.bench.saturation import SaturationMonitor
from pytest_sskj.bench.transport import _literal_address
from pytest_sskj.bench.workload import Workload
from pytest_sskj.testing.mock_server import MockConfig, MockServer


def _monitor(lags: list[float], cpu_s: float, wall_s: float = 2.0) -> SaturationMonitor:
    m = SaturationMonitor()
    m.loop_lags_ms = lags
    m._wall, m._cpu = wall_s, cpu_s
    return m


def test_one_long_stall_marks_the_point_although_the_p90_is_small() -> None:
    bound, ev = _monitor([1.0] * 200 + [451.0], cpu_s=0.1).verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=4)
    assert ev["loop_lag_p90_ms"] < 2.0
    assert bound and any("longest event-loop stall 451.00 ms" in r for r in ev["reasons"]), ev["reasons"]


def test_a_short_stall_within_a_quarter_of_e2e_is_tolerated() -> None:
    bound, ev = _monitor([1.0] * 200 + [40.0], cpu_s=0.1).verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=4)
    assert not bound and ev["kind"] is None and ev["advice"] is None, ev


def test_a_starved_client_at_c1_is_told_the_server_shares_its_cores() -> None:
    bound, ev = _monitor([60.0] * 100, cpu_s=0.1).verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=1)
    assert bound and ev["kind"] == "starved"
    assert "the server shares the client's cores" in ev["advice"] and "--concurrency" not in ev["advice"]


def test_a_saturated_client_is_told_to_lower_the_concurrency_except_at_c1() -> None:
    _, ev = _monitor([60.0] * 100, cpu_s=1.9).verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=16)
    assert ev["kind"] == "saturated" and "lower --concurrency" in ev["advice"], ev
    _, ev1 = _monitor([60.0] * 100, cpu_s=1.9).verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=1)
    assert ev1["kind"] == "saturated" and "--concurrency" not in ev1["advice"], ev1


def test_a_literal_ip_is_not_resolved_and_a_name_is() -> None:
    assert _literal_address(("127.0.0.1", 8000)) == [
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", 8000))
    ]
    assert _literal_address(("[::1]", 8000)) == [
        (socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::1", 8000, 0, 0))
    ]
    assert _literal_address(("localhost", 8000)) is None


def test_dialling_a_literal_ip_never_calls_getaddrinfo() -> None:
    from pytest_sskj.bench import transport

    async def main() -> None:
        server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()

        async def refuse(*a: object, **k: object) -> object:
            raise AssertionError(f"getaddrinfo called for a literal IP: {a}")

        loop.getaddrinfo = refuse  # type: ignore[method-assign]
        sock = await transport._dial(loop, ("127.0.0.1", port))
        sock.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())


def test_reads_that_carry_several_token_events_make_tpot_unreliable() -> None:
    m = _monitor([1.0] * 200, cpu_s=0.1)
    m.token_reads, m.multi_frame_reads = 100, 40
    bound, ev = m.verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=2)
    assert bound and ev["multi_frame_read_share"] == 0.4, ev
    assert any("40% of token reads carried several SSE events" in r and "TPOT" in r for r in ev["reasons"]), ev
    assert ev["kind"] == "starved" and "--sskj-cpu-partition" in ev["advice"], ev
    m.multi_frame_reads = 5
    assert not m.verdict(ttft_p50_ms=20.0, e2e_p50_ms=60.0, concurrency=2)[0], "5 % of reads: within the allowance"


def test_the_client_counts_reads_that_drained_several_token_events(tmp_path: Path) -> None:
    """A server that sends the frames of four steps in one write (their bytes wait in the socket together, as for
    a late loop) gives multi-frame reads; one frame every 30 ms gives one frame per read.  (Frames merely sent
    back to back, itl 0, coalesce or not by the box's load: on a busy CI box 0.11 of the reads, on a quiet one
    most of them.)"""
    w = Workload(isl=16, osl=8, requests=4, concurrency=1, warmup=0)
    with MockServer(MockConfig(ttft_ms=2, itl_ms=0, frames_per_write=4)) as srv:
        burst = run_bench(srv.url, w, tmp_path / "burst")
    with MockServer(MockConfig(ttft_ms=2, itl_ms=30)) as srv:
        paced = run_bench(srv.url, w, tmp_path / "paced")
    assert burst.metrics["multi_frame_read_share"] > 0.2, burst.metrics
    assert burst.metrics["client_bound"] and "TPOT/ITL unreliable" in burst.metrics["client_bound_reasons"]
    assert paced.metrics["multi_frame_read_share"] < 0.2, paced.metrics
