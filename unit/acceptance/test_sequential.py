"""The sequential A/B design (``--repeats`` .. ``--sskj-max-repeats``) and the power planner.

Simulated servers with known ground truth (the same model as ``test_compare``: a lognormal per-repeat drift,
lognormal request noise, throughput measurement noise of half the drift): the A/A false-positive rate of the
whole sequential procedure stays <= 5 %, a true +7.6 % at 3 % drift is found within 10 repeats per side in
>= 90 %, and at 0.2 % drift every comparison stops at the first look.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_sskj.acceptance.compare import DECIDED, RepeatSample, Verdict, compare
from pytest_sskj.acceptance.sequential import Design, log_spread_pct, plan_line, plan_repeats, run_sequential


def _rep(rng: np.random.Generator, tps: float, ttft: float, drift: float) -> RepeatSample:
    slow = math.exp(rng.normal(0.0, drift))
    req = ttft * slow * np.exp(rng.normal(0.0, 0.3, 40))
    return RepeatSample(
        {
            "input_throughput": tps / slow * math.exp(rng.normal(0.0, drift / 2)),
            "median_ttft_ms": float(np.median(req)),
            "p95_ttft_ms": float(np.percentile(req, 95)),
        }
    )


def _run(seed: int, ratio: float, drift: float, design: Design) -> tuple[Verdict, int]:
    rng = np.random.default_rng(seed)
    base: list[RepeatSample] = []
    cand: list[RepeatSample] = []

    def extend(_n: int) -> None:
        base.append(_rep(rng, 1000.0, 500.0, drift))
        cand.append(_rep(rng, 1000.0 * ratio, 500.0 / ratio, drift))

    for _ in range(design.first):
        extend(0)
    v = run_sequential(design, lambda n, conf: compare("a", "b", base[:n], cand[:n], confidence=conf), extend)
    assert v is not None
    return v, len(base)


def test_spending_sums_to_alpha_and_the_fixed_design_is_one_full_look() -> None:
    d = Design(3, 10)
    total = sum(d.look_alpha(n) for n in range(3, 11))
    assert abs(total - 0.05) < 1e-12, f"the looks must spend exactly alpha 0.05, spent {total}"
    assert all(d.look_alpha(n) < 0.05 for n in range(3, 11))
    assert Design(3, 3).look_alpha(3) == 0.05 and not Design(3, 3).sequential


def test_every_look_is_recorded_with_repeat_statistic_and_decision() -> None:
    v, n = _run(7, 1.076, 0.03, Design(3, 10))
    assert v.looks and v.looks[-1]["repeats"] == n and v.looks[-1]["action"] == "stop", v.looks
    assert all(x["action"] == "continue" for x in v.looks[:-1]), v.looks
    assert all(x["t"] is not None and x["statistic"].startswith("Welch t") for x in v.looks), v.looks
    assert f"stopped after repeat {n}" in v.message() and "Welch t" in v.message(), v.message()
    assert v.as_dict()["sequential"]["looks"] == [dict(x) for x in v.looks]


def test_fixed_design_records_no_looks() -> None:
    v, n = _run(7, 1.076, 0.03, Design(3, 3))
    assert n == 3 and v.looks == () and "sequential" not in v.message()


def test_a_client_bound_side_stops_at_once() -> None:
    base = [RepeatSample({"input_throughput": 1000.0 + i}) for i in range(3)]
    cand = [RepeatSample({"input_throughput": 1010.0 + i}, client_bound=(i == 0)) for i in range(3)]
    added: list[int] = []
    v = run_sequential(
        Design(3, 10),
        lambda n, conf: compare("a", "b", base[:n], cand[:n], confidence=conf, metrics=("input_throughput",)),
        added.append,
    )
    assert v is not None and v.outcome == "inconclusive" and v.blocked and not added, v.message()
    assert "more repeats cannot decide" in v.looks[-1]["why"]


@pytest.mark.parametrize("n_sims", [300])
def test_sequential_calibration(n_sims: int) -> None:
    d = Design(3, 10)
    fp = sum(_run(40_000 + i, 1.0, 0.03, d)[0].outcome in DECIDED for i in range(n_sims))
    found = sum(_run(50_000 + i, 1.076, 0.03, d)[0].outcome == "better" for i in range(n_sims))
    assert fp / n_sims <= 0.05, f"A/A: expected <= 5 % better/worse over the whole procedure, saw {fp}/{n_sims}"
    assert found / n_sims >= 0.90, f"+7.6 % at 3 % drift within N=10: expected >= 90 %, saw {found}/{n_sims}"
    quiet = [_run(60_000 + i, 1.076, 0.002, d)[1] for i in range(50)]
    assert sum(quiet) / len(quiet) == 3.0, f"0.2 % drift: expected every comparison to stop at 3, saw {quiet}"


def test_planner_sizes_repeats_and_states_the_time() -> None:
    assert plan_repeats(5.0, 3.1) == 10
    assert plan_repeats(20.0, 3.0) == 3
    assert plan_repeats(5.0, 60.0) is None
    line = plan_line(5.0, 3.1, observed=True, repeat_s=30.0)
    assert (
        line
        == "to decide 5 % at the observed 3.1 % spread (90% power): 10 repeats per side, about 10 min for both sides"
    )
    assert "not known yet" in plan_line(5.0, None, observed=True)
    spread = log_spread_pct([100.0, 103.0, 97.0])
    assert spread is not None and 2.9 < spread < 3.1, spread
