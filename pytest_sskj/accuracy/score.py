"""Exact-match score of one side's completions over a fixed question subset, with a 95 % Wilson interval.

Per question the completion is graded (:func:`pytest_sskj.accuracy.extract.grade`): the extracted answer as
written, whether it equals the reference after normalisation.  The score is ``correct / questions``; a completion
that is missing (the request failed) counts as wrong and is counted apart (``missing``), as is one with no
extractable answer (``invalid``).  Each graded answer is kept with its question index so that two sides can be
paired question by question.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_sskj.accuracy.extract import EXTRACTORS, grade
from pytest_sskj.accuracy.gsm8k import Item

Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson 95 % interval of a proportion ``k/n`` (``None`` for ``n == 0``)."""
    if n <= 0:
        return None
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


@dataclass(frozen=True)
class Graded:
    """One question's outcome: its record index, the extracted answer (``None``: none found or no completion),
    the reference, and whether it was right."""

    index: int
    extracted: str | None
    reference: str
    correct: bool
    missing: bool = False


@dataclass(frozen=True)
class Score:
    """A side's exact-match score: ``accuracy`` in [0, 1] with its Wilson interval (``None`` with no question)."""

    extraction: str
    questions: int
    correct: int
    invalid: int
    missing: int
    accuracy: float | None
    ci95: tuple[float, float] | None

    def line(self) -> str:
        """``exact match (flexible) 41/64 = 64.1 % (95 % CI 51.8 .. 74.8 %), 2 invalid``."""
        if self.accuracy is None or self.ci95 is None:
            return f"exact match ({self.extraction}): no questions"
        lo, hi = self.ci95
        extra = [f"{n} {what}" for n, what in ((self.invalid, "invalid"), (self.missing, "missing")) if n]
        return (
            f"exact match ({self.extraction}) {self.correct}/{self.questions} = {100 * self.accuracy:.1f} % "
            f"(95 % CI {100 * lo:.1f} .. {100 * hi:.1f} %)" + (", " + ", ".join(extra) if extra else "")
        )


def grade_all(items: Sequence[Item], completions: Mapping[int, str], method: str) -> list[Graded]:
    """Grade each item's completion (by record index; an absent one is ``missing``) with extraction ``method``."""
    if method not in EXTRACTORS:
        raise ValueError(f"unknown extraction {method!r}; accepted: {', '.join(EXTRACTORS)}")
    out: list[Graded] = []
    for it in items:
        text = completions.get(it.index)
        if text is None:
            out.append(Graded(it.index, None, it.reference, False, missing=True))
            continue
        extracted, ok = grade(text, it.reference, method)
        out.append(Graded(it.index, extracted, it.reference, ok))
    return out


def score(graded: Sequence[Graded], method: str) -> Score:
    """The exact-match score of graded answers."""
    n = len(graded)
    k = sum(g.correct for g in graded)
    missing = sum(g.missing for g in graded)
    invalid = sum(1 for g in graded if g.extracted is None and not g.missing)
    return Score(method, n, k, invalid, missing, k / n if n else None, wilson(k, n))
