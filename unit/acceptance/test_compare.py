"""The A/B comparison: medians of repeats, seeded bootstrap CI, margin and the users' wording."""

from __future__ import annotations

import numpy as np

from pytest_sskj.acceptance.compare import RepeatSample, bootstrap_ratio, compare, fmt_pct, median


def _repeats(tps: float, ttft_ms: float, *, n: int = 40, noise: float = 0.02, seed: int = 0) -> list[RepeatSample]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(3):
        ttft = ttft_ms * (1 + noise * rng.standard_normal(n))
        e2e = ttft + 5.0
        out.append(
            RepeatSample(
                tps * (1 + noise * rng.standard_normal()),
                float(np.median(ttft)),
                float(np.percentile(ttft, 95)),
                tuple(ttft),
                tuple(e2e),
            )
        )
    return out


def test_users_representative_point_reads_like_their_table() -> None:
    base = _repeats(2930.03, 43587.0, seed=1, noise=0.005)
    cand = _repeats(3251.25, 39267.0, seed=2, noise=0.005)
    v = compare("marlin", "flashinfer_mxfp4", base, cand, margin_pct=5.0)
    tps = v.metrics[0]
    assert tps.name == "input TPS" and abs(tps.delta_pct - 10.96) < 1.5, f"input TPS delta {tps.delta_pct}"
    assert v.outcome == "better", v.message()
    msg = v.message()
    assert msg.startswith("flashinfer_mxfp4 vs marlin: +1"), msg
    assert "% input TPS (95 % CI +" in msg and "−" in msg and "TTFT P50" in msg and "TTFT P95" in msg, msg
    assert "beats marlin by at least 5 %" in msg


def test_pure_noise_is_inconclusive_not_a_pass_or_a_fail() -> None:
    base = _repeats(1000.0, 500.0, seed=3, noise=0.2)
    cand = _repeats(1000.0, 500.0, seed=4, noise=0.2)
    v = compare("a", "b", base, cand)
    assert v.outcome == "inconclusive", v.message()
    assert "add --repeats or --requests" in v.message()


def test_clear_loss_is_worse_and_names_the_metrics() -> None:
    v = compare("a", "b", _repeats(1000.0, 500.0, seed=5), _repeats(700.0, 800.0, seed=6))
    assert v.outcome == "worse"
    assert "b does not beat a" in v.message() and "input TPS" in v.message()


def test_margin_turns_a_small_win_into_a_failure() -> None:
    base, cand = _repeats(1000.0, 500.0, seed=7, noise=0.002), _repeats(1030.0, 485.0, seed=8, noise=0.002)
    assert compare("a", "b", base, cand, margin_pct=0.0).outcome == "better"
    assert compare("a", "b", base, cand, margin_pct=10.0).outcome == "worse"


def test_bootstrap_is_seeded_and_reproducible() -> None:
    base, cand = _repeats(1000.0, 500.0, seed=9, noise=0.1), _repeats(1100.0, 450.0, seed=10, noise=0.1)
    a = bootstrap_ratio(base, cand, "ttft_p50", n_boot=500, confidence=0.95, seed=11)
    b = bootstrap_ratio(base, cand, "ttft_p50", n_boot=500, confidence=0.95, seed=11)
    c = bootstrap_ratio(base, cand, "ttft_p50", n_boot=500, confidence=0.95, seed=12)
    assert a == b and a != c
    assert a is not None and a[0] < -10.0 < a[1], f"CI {a} should contain the true -10 %"


def test_without_samples_judges_medians_and_says_so() -> None:
    base = [RepeatSample(1000.0, 500.0, 600.0)] * 3
    cand = [RepeatSample(1200.0, 400.0, 500.0)] * 3
    v = compare("a", "b", base, cand)
    assert v.outcome == "better"
    assert all(m.ci_low_pct is None for m in v.metrics)
    assert "no per-request samples" in v.message()


def test_helpers() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0 and median([1.0, 2.0]) == 1.5 and median([]) is None
    assert fmt_pct(10.964) == "+10.96 %" and fmt_pct(-9.91) == "−9.91 %" and fmt_pct(None) == "n/a"
