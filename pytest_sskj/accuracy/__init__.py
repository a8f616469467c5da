"""Accuracy gates (issue 51): a GSM8K-format question set, the standard answer extraction, exact-match scores.

The interface (everything callers use):

- :func:`load` ``(name, path)`` -> :class:`QuestionSet` (sha256, record count, items); every problem in the file is
  an :class:`AccuracySetError` naming the line, what was wrong, what is accepted and a hint.
- :meth:`QuestionSet.subset` ``(n=64, seed=SUBSET_SEED)``: the fixed subset, the same indices on every run;
  :meth:`QuestionSet.manifest` what a run keeps about it.
- :data:`EXTRACTORS` (``strict``, ``flexible``: lm-eval's ``gsm8k`` filters), :func:`grade`, :func:`normalise`.
- :func:`grade_all` ``(items, completions, method)`` -> :class:`Graded` per question; :func:`score` -> :class:`Score`
  (exact match with a 95 % Wilson interval, :func:`wilson`).
- :func:`parse_margin` (``delta>=-1pt`` -> :class:`Margin`; :class:`MarginError` otherwise) and :func:`judge`
  ``(baseline, candidate, margin)`` -> :class:`AccuracyVerdict`: the paired non-inferiority test
  (``non-inferior`` / ``worse`` / ``inconclusive`` with the questions that would decide), :data:`METHOD_VERSION`.
- :func:`pytest_sskj.accuracy.client.ask` (the questions through an engine's text API) and
  :func:`pytest_sskj.accuracy.control.known_answer_file` (the known-answer control set).
- :mod:`pytest_sskj.accuracy.generate`: CI's GSM-style items from reasoning-gym's GSM-Symbolic generators.

Definitions: docs/accuracy.md.
"""

from __future__ import annotations

from pytest_sskj.accuracy.extract import EXTRACTORS, INVALID, grade, normalise
from pytest_sskj.accuracy.gate import METHOD_VERSION, AccuracyVerdict, Margin, MarginError, judge, parse_margin
from pytest_sskj.accuracy.gsm8k import DEFAULT_QUESTIONS, SUBSET_SEED, AccuracySetError, Item, QuestionSet, load
from pytest_sskj.accuracy.score import Graded, Score, grade_all, score, wilson

__all__ = [
    "DEFAULT_QUESTIONS",
    "EXTRACTORS",
    "INVALID",
    "METHOD_VERSION",
    "SUBSET_SEED",
    "AccuracySetError",
    "AccuracyVerdict",
    "Graded",
    "Item",
    "Margin",
    "MarginError",
    "QuestionSet",
    "Score",
    "grade",
    "grade_all",
    "judge",
    "load",
    "normalise",
    "parse_margin",
    "score",
    "wilson",
]
