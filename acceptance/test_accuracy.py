"""Accuracy gates: a backend that is faster but answers worse must fail (docs/accuracy.md).

Each backend's server answers a fixed seeded subset of the user's GSM8K-format question file
(``--sskj-accuracy-set gsm8k=PATH``, default 64 questions) greedily at each accuracy concurrency (default C1 and
C8), while it is up.  ``test_accuracy`` reports one backend's exact-match score with its confidence interval and
fails when a question went unanswered; ``test_accuracy_gate`` judges every candidate against the baseline as a
paired non-inferiority test at ``--sskj-accuracy-min`` (e.g. ``delta>=-1pt``): ``worse``, or ``inconclusive``
on too few questions to decide the margin (saying how many would), fail.  A backend named twice is the gate's
A/A control: it passes unless it comes out ``worse``.
"""

from __future__ import annotations

from typing import Any

import pytest

from pytest_sskj.acceptance.accuracy import AccuracyComparison, AccuracyKey
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import CRASH, verdict_tag


def test_accuracy(
    sskj_accuracy: AccuracyKey, sskj_acceptance: Acceptance, sskj_site: SiteDefaults, request: pytest.FixtureRequest
) -> None:
    key = sskj_accuracy
    sskj_acceptance.label(sskj_site, backend=key.backend, C=key.concurrency, layout=key.layout)
    v = sskj_acceptance.accuracy(key, request.node.nodeid)
    _report(v)
    if v["passed"] is None:
        pytest.fail(f"{CRASH} {v['message']}", pytrace=False)
    assert v["passed"], f"{CRASH} every question must be answered: {v['message']}"


def test_accuracy_gate(
    sskj_accuracy_comparison: AccuracyComparison,
    sskj_acceptance: Acceptance,
    sskj_site: SiteDefaults,
    request: pytest.FixtureRequest,
) -> None:
    comp = sskj_accuracy_comparison
    sskj_acceptance.label(
        sskj_site, baseline=comp.baseline, candidate=comp.candidate, C=comp.concurrency, layout=comp.layout
    )
    v = sskj_acceptance.accuracy_gate(comp, request.node.nodeid)
    _report(v)
    if v["passed"] is None:
        pytest.fail(f"{CRASH} {v['message']}", pytrace=False)
    if comp.is_control:
        assert v["passed"], f"{verdict_tag('worse')} A/A control: the same backend twice must not answer worse: " + str(
            v["message"]
        )
        return
    assert v["passed"], f"{verdict_tag(str(v['outcome']))} {v['message']}"


def _report(v: dict[str, Any]) -> None:
    from pytest_sskj.report import allure

    score = v.get("score") or {}
    allure.metric_parameters(
        accuracy_frac=score.get("accuracy"),
        accuracy_delta_pt=v.get("delta_pt"),
        questions=score.get("questions") or (v.get("pairs") or {}).get("n"),
    )
    allure.attach_json(f"{v['kind']} {v['id']}", v)
    print(v["message"])
