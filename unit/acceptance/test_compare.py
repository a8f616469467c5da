"""The A/B comparison: the repeat is the unit of replication (Welch t on log per-repeat statistics).

Behaviour changed deliberately from the per-request bootstrap (issue 12): the request-level bootstrap
and its ``bootstrap_ratio`` are gone, ``RepeatSample`` carries one value per metric per repeat, and
the outcomes gained ``equivalent`` and ``incomparable``.  The calibration tests below simulate servers
with between-repeat drift and within-repeat request noise (known ground truth) and assert the false
positive rate of A/A comparisons and the power at a true 20 % difference over a seeded batch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_sskj.acceptance.compare import (
    DECIDED,
    MIN_REPEATS,
    RepeatSample,
    compare,
    fmt_pct,
    median,
    repeat_interval,
    t_quantile,
)


def _repeats(
    tps: float, ttft_ms: float, *, n: int = 3, drift: float = 0.02, seed: int = 0, requests: int = 40
) -> list[RepeatSample]:
    """``n`` simulated server runs: a per-run slowdown ``exp(N(0, drift))``, lognormal request noise and a
    throughput measurement noise of ``drift / 2`` on top."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n):
        slow = math.exp(rng.normal(0.0, drift))
        req = ttft_ms * slow * np.exp(rng.normal(0.0, 0.3, requests))
        out.append(
            RepeatSample(
                {
                    "input_throughput": tps / slow * math.exp(rng.normal(0.0, drift / 2)),
                    "median_ttft_ms": float(np.median(req)),
                    "p95_ttft_ms": float(np.percentile(req, 95)),
                },
                f"x-r{r + 1}",
            )
        )
    return out


def test_t_quantiles_match_the_tables() -> None:
    for df, want in ((2, 4.3027), (4, 2.7764), (10, 2.2281), (100, 1.9840)):
        got = t_quantile(0.975, df)
        assert abs(got - want) < 1e-3, f"t(0.975, {df}): expected {want}, saw {got:.4f}"


def test_users_representative_point_reads_like_their_table() -> None:
    base = _repeats(2930.03, 43587.0, seed=1, drift=0.005)
    cand = _repeats(3251.25, 39267.0, seed=2, drift=0.005)
    v = compare("marlin", "flashinfer_mxfp4", base, cand, margin_pct=5.0)
    tps = v.metrics[0]
    assert tps.name == "input_throughput" and tps.delta_pct is not None and abs(tps.delta_pct - 10.96) < 1.5
    assert v.outcome == "better", v.message()
    msg = v.message()
    assert msg.startswith("flashinfer_mxfp4 vs marlin: +1"), msg
    assert "% Input TPS (95 % CI +" in msg and "−" in msg and "TTFT P50" in msg and "TTFT P95" in msg, msg
    assert "beats marlin on Input TPS by more than 5 %" in msg, msg
    assert v.as_dict()["method"].startswith("sskj-verdict/3"), "every verdict records its method version"


def test_pure_noise_is_inconclusive_not_a_pass_or_a_fail() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, seed=3, drift=0.2), _repeats(1000.0, 500.0, seed=4, drift=0.2))
    assert v.outcome == "inconclusive", v.message()
    assert "add --repeats" in v.message()


def test_tight_identical_sides_are_equivalent() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, seed=13, drift=0.005), _repeats(1000.0, 500.0, seed=14, drift=0.005))
    assert v.outcome == "equivalent", v.message()


def test_clear_loss_is_worse_and_names_the_metric() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, seed=5), _repeats(700.0, 800.0, seed=6))
    assert v.outcome == "worse", v.message()
    assert "b does not beat a" in v.message() and "Input TPS" in v.message()


def test_margin_turns_a_small_win_into_a_failure() -> None:
    base = _repeats(1000.0, 500.0, seed=7, drift=0.002)
    cand = _repeats(1030.0, 485.0, seed=8, drift=0.002)
    assert compare("a", "b", base, cand, margin_pct=0.0).outcome == "better"
    assert compare("a", "b", base, cand, margin_pct=10.0).outcome == "worse"


def test_noise_floor_raises_the_bar() -> None:
    base = _repeats(1000.0, 500.0, seed=7, drift=0.002)
    cand = _repeats(1030.0, 485.0, seed=8, drift=0.002)
    v = compare("a", "b", base, cand, noise_floor_pct=4.0)
    assert v.outcome != "better" and v.threshold_pct == 4.0, v.message()
    assert "A/A noise floor" in v.message(), v.message()


def test_too_few_repeats_is_inconclusive_and_says_how_many_are_needed() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, n=1, seed=1), _repeats(2000.0, 250.0, n=3, seed=2))
    assert v.outcome == "inconclusive", v.message()
    assert f"at least {MIN_REPEATS} are needed" in v.message() and "--repeats" in v.message()


def test_client_bound_side_is_inconclusive_whatever_the_numbers() -> None:
    base = _repeats(1000.0, 500.0, seed=1, drift=0.002)
    cand = [RepeatSample(r.values, r.point_id, client_bound=(i == 0)) for i, r in enumerate(_repeats(2000.0, 250.0))]
    v = compare("a", "b", base, cand)
    assert v.outcome == "inconclusive" and "client-bound (x-r1)" in v.message(), v.message()


def test_incomparable_sides_are_marked_with_the_reason() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0), _repeats(2000.0, 250.0), incomparable=["driver 550 vs 560"])
    assert v.outcome == "incomparable" and "driver 550 vs 560" in v.message()


def test_a_throughput_win_that_costs_latency_is_not_a_win() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, drift=0.005, seed=1), _repeats(1300.0, 900.0, drift=0.005, seed=2))
    assert v.outcome == "inconclusive" and "trade-off" in v.message(), v.message()


def test_interval_is_welch_on_logs() -> None:
    got = repeat_interval([100.0, 110.0, 90.0], [120.0, 132.0, 108.0], confidence=0.95)
    assert got is not None
    delta, lo, hi = got
    assert abs(delta - 20.0) < 1e-9 and lo < 20.0 < hi, got
    assert repeat_interval([1.0], [1.0, 2.0], confidence=0.95) is None


CALIBRATION_DRIFT = 0.03
"""Between-repeat drift of the simulation: a lognormal slowdown with sigma 3 % per server run (plus 1.5 %
throughput measurement noise); at 5 % the power at 3 repeats per side drops to about 72 % (docs/verdicts.md)."""


@pytest.mark.parametrize("n_sims", [400])
def test_calibration_aa_false_positives_at_most_5_percent_power_at_20_percent_at_least_90(n_sims: int) -> None:
    fp = found = 0
    for i in range(n_sims):
        base = _repeats(1000.0, 500.0, drift=CALIBRATION_DRIFT, seed=10_000 + i)
        same = _repeats(1000.0, 500.0, drift=CALIBRATION_DRIFT, seed=20_000 + i)
        better = _repeats(1200.0, 500.0 / 1.2, drift=CALIBRATION_DRIFT, seed=30_000 + i)
        fp += compare("a", "a#2", base, same).outcome in DECIDED
        found += compare("a", "b", base, better).outcome == "better"
    assert fp / n_sims <= 0.05, f"A/A: expected <= 5 % better/worse, saw {fp}/{n_sims} = {fp / n_sims:.1%}"
    assert found / n_sims >= 0.90, f"true +20 %: expected >= 90 % found, saw {found}/{n_sims} = {found / n_sims:.1%}"


def test_helpers() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([1.0, 2.0]) == 1.5 and median([]) is None
    assert fmt_pct(10.964) == "+10.96 %" and fmt_pct(-9.91) == "−9.91 %" and fmt_pct(None) == "n/a"
