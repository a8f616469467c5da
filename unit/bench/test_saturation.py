"""Client-saturation allowances: relative to the measured latencies, with floors above platform noise."""

from __future__ import annotations

from pytest_sskj.bench.saturation import SaturationMonitor


def _monitor(lag_ms: float, dispatch_ms: float = 0.5) -> SaturationMonitor:
    m = SaturationMonitor()
    m.loop_lags_ms = [0.2] * 80 + [lag_ms] * 20  # P90 = lag_ms
    m.dispatch_lags_ms = [dispatch_ms] * 40
    return m


def test_platform_noise_below_the_floor_is_not_client_bound() -> None:
    bound, ev = _monitor(3.0).verdict(ttft_p50_ms=20.0, e2e_p50_ms=40.0)
    assert not bound, ev["reasons"]
    assert ev["allowed"]["loop_lag_ms"] == 10.0 and ev["loop_lag_p90_ms"] == 3.0


def test_lag_allowance_grows_with_the_latency_it_distorts() -> None:
    assert not _monitor(14.0).verdict(ttft_p50_ms=300.0)[0], "14 ms of lag is < 5 % of a 300 ms TTFT"
    bound, ev = _monitor(14.0).verdict(ttft_p50_ms=100.0)
    assert bound and ev["reasons"] == ["event-loop lag p90 14.00 ms > 10.00 ms allowed"], ev["reasons"]


def test_dispatch_lag_is_judged_against_e2e() -> None:
    bound, ev = _monitor(1.0, dispatch_ms=30.0).verdict(ttft_p50_ms=100.0, e2e_p50_ms=400.0)
    assert bound and ev["reasons"] == ["dispatch lag p90 30.00 ms > 20.00 ms allowed"], ev["reasons"]
