"""The accuracy A/B is a paired non-inferiority test with a stated margin: it passes only when the interval clears the
margin, calls a clear loss ``worse``, and on too few questions says ``inconclusive`` with how many would decide."""

from __future__ import annotations

import random

import pytest

from pytest_sskj.accuracy.gate import Margin, MarginError, Pairs, delta_interval, judge, pair, parse_margin
from pytest_sskj.accuracy.score import Graded


def _side(bits: list[bool], start: int = 0) -> list[Graded]:
    return [Graded(start + i, None, "1", b) for i, b in enumerate(bits)]


@pytest.mark.parametrize(
    ("text", "points"), [("delta>=-1pt", 1.0), ("-2.5pt", 2.5), ("delta >= -0pt", 0.0), (" DELTA>=-3pt ", None)]
)
def test_margins_are_percentage_point_losses(text: str, points: float | None) -> None:
    if points is None:
        with pytest.raises(MarginError):
            parse_margin(text)
        return
    got = parse_margin(text)
    assert got == Margin(points), f"{text!r}: expected {points} points, got {got}"
    assert parse_margin("none") is None


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("delta>=-1", "the unit is percentage points"),
        ("delta>=-1%", "not '%'"),
        ("delta>=1pt", "a margin bounds a loss"),
        ("delta>=-nanpt", "the unit is percentage points"),
        ("delta>=-100pt", "try delta>=-1pt"),
        ("", "the unit is percentage points"),
    ],
)
def test_a_bad_margin_is_refused_with_what_is_accepted_and_a_hint(text: str, hint: str) -> None:
    with pytest.raises(MarginError) as err:
        parse_margin(text)
    msg = str(err.value)
    assert "accepted: delta>=-Npt" in msg and hint in msg, f"expected the accepted forms and {hint!r}: {msg}"


def test_identical_answers_on_64_questions_cannot_prove_a_1pt_margin_and_say_how_many_would() -> None:
    bits = [i % 5 != 0 for i in range(64)]
    v = judge(_side(bits), _side(bits), Margin(1.0))
    assert v.outcome == "inconclusive" and not v.passed, v.message
    assert v.needed == 194, f"the interval's own floor for 1pt is 194 questions: {v.message}"
    assert "about 194 questions would decide delta>=-1pt" in v.message
    assert judge(_side(bits), _side(bits), Margin(5.0)).outcome == "non-inferior"


def test_a_candidate_that_loses_many_answers_is_worse() -> None:
    base = [True] * 50 + [False] * 14
    cand = [True] * 30 + [False] * 34
    v = judge(_side(base), _side(cand), Margin(1.0))
    assert v.outcome == "worse" and v.delta_pt == pytest.approx(-31.25), v.message
    assert v.pairs == Pairs(30, 20, 0, 14)


def test_an_estimate_below_the_margin_is_never_promised_a_pass() -> None:
    base = [True] * 60 + [False] * 4
    cand = [False] * 3 + [True] * 57 + [False] * 4
    v = judge(_side(base), _side(cand), Margin(2.0))
    assert v.outcome == "inconclusive" and v.needed is None, v.message
    assert "more questions would not make it pass" in v.message


def test_sides_that_answered_different_questions_are_not_compared() -> None:
    with pytest.raises(ValueError, match="did not answer the same questions"):
        pair(_side([True] * 4), _side([True] * 4, start=1))


def test_the_interval_is_agresti_mins_for_matched_proportions() -> None:
    # 100 pairs, 10 baseline-only, 4 candidate-only: d* = (4.5 - 10.5) / 102; var = (15 - 36 / 102) / 102^2
    est = delta_interval(Pairs(70, 10, 4, 16))
    assert est is not None
    d, lo, hi = est
    assert d == pytest.approx(-6.0)
    assert (round(lo, 2), round(hi, 2)) == (-13.24, 1.47), (lo, hi)  # -0.0588 -+ 1.96 * 0.03752


def _simulate(true_base_only: float, true_cand_only: float, n: int, margin: float, trials: int) -> float:
    rng = random.Random(51)
    passed = 0
    for _ in range(trials):
        base, cand = [], []
        for _ in range(n):
            u = rng.random()
            b_only, c_only = u < true_base_only, true_base_only <= u < true_base_only + true_cand_only
            right = rng.random() < 0.8
            base.append(True if b_only else False if c_only else right)
            cand.append(False if b_only else True if c_only else right)
        passed += judge(_side(base), _side(cand), Margin(margin)).passed
    return passed / trials


def test_at_a_true_loss_equal_to_the_margin_the_gate_passes_at_most_about_2_5_percent_of_the_time() -> None:
    rate = _simulate(0.06, 0.04, n=300, margin=2.0, trials=1500)
    assert rate <= 0.04, f"type-I error at the margin's edge: expected about 2.5 % (one-sided), got {rate:.1%}"


def test_with_no_true_loss_and_enough_questions_the_gate_usually_passes() -> None:
    rate = _simulate(0.03, 0.03, n=1000, margin=3.0, trials=300)
    assert rate >= 0.8, f"power with 1000 questions and a 3pt margin: expected >= 80 %, got {rate:.1%}"
