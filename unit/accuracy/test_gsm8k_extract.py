"""GSM8K answer extraction and exact match as lm-eval 0.4.13's ``gsm8k`` task defines them (docs/accuracy.md)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_sskj.accuracy import EXTRACTORS, grade, normalise
from pytest_sskj.accuracy.extract import flexible, reference_answer, strict


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("She pays 3 * 6 = <<3*6=18>>18 dollars.\n#### 18", "18"),
        ("#### 1,000 apples", "1,000"),
        ("first #### 5 then #### 7", "5"),  # the first match
        ("#### -12.5", "-12.5"),
        ("The answer is 18.", None),  # no '#### ': strict finds nothing
        ("####18", None),  # the space is part of the pattern
    ],
)
def test_strict_takes_the_first_number_after_four_hashes(text: str, want: str | None) -> None:
    assert strict(text) == want, f"strict({text!r}): expected {want!r}, got {strict(text)!r}"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("5 apples and 3 pears, so 8", "8"),  # the last match
        ("It costs $1,234.", "$1,234."),
        ("She ends with -5 degrees", "-5"),
        ("7", "7"),  # one digit: the second alternative
        ("no number here", None),
        ("#### 42\nQuestion: a farmer has 3 cows", "3"),  # a run-on continuation wins: flexible is not strict
    ],
)
def test_flexible_takes_the_last_number_like_run(text: str, want: str | None) -> None:
    assert flexible(text) == want, f"flexible({text!r}): expected {want!r}, got {flexible(text)!r}"


def test_normalisation_removes_commas_dollars_rationale_and_a_final_period() -> None:
    assert normalise("$1,234.") == "1234"
    assert normalise("Step one.\n#### 72") == "72"
    assert normalise(" 18 ") == "18"
    assert normalise("18.0") == "18.0", "string match, as lm-eval: 18.0 is not 18"


def test_the_reference_is_the_rationales_number_normalised() -> None:
    assert reference_answer("48/2 = <<48/2=24>>24 clips in May.\n#### 1,072") == "1072"
    assert reference_answer("no final line") is None


@pytest.mark.parametrize("method", sorted(EXTRACTORS))
def test_a_right_answer_is_correct_and_a_wrong_or_missing_one_is_not(method: str) -> None:
    assert grade("so she has 18 left.\n#### 18", "18", method) == ("18", True)
    assert grade("so she has 17 left.\n#### 17", "18", method) == ("17", False)
    assert grade("I do not know", "18", method) == (None, False), "no answer is never correct"


def test_strict_and_flexible_disagree_where_the_standard_says_they_do() -> None:
    """A completion that states its answer without ``####``: flexible finds it, strict does not."""
    text = "Natalia sold 48 + 24 = 72 clips."
    assert grade(text, "72", "flexible") == ("72", True)
    assert grade(text, "72", "strict") == (None, False)


@given(n=st.integers(min_value=-(10**9), max_value=10**9), dollar=st.booleans(), period=st.booleans())
def test_any_integer_written_with_commas_dollars_or_a_period_is_matched(n: int, dollar: bool, period: bool) -> None:
    written = f"{'-' if n < 0 else ''}{'$' if dollar else ''}{abs(n):,}{'.' if period else ''}"
    completion = f"Adding it all up gives {written}"
    extracted, ok = grade(completion, str(n), "flexible")
    seen = f"extracted {extracted!r} -> {normalise(extracted or '')!r}"
    assert ok, f"expected {written!r} to match the reference {n}: {seen}"
    extracted, ok = grade(completion, str(n + 1), "flexible")
    assert not ok, f"expected {written!r} not to match {n + 1}"
