"""A/B verdicts: every candidate backend vs the baseline (the first backend) per chunk and concurrency.

The users' "FlashInfer >= Marlin" as a real verdict: input throughput and TTFT P50/P95, with the repeat
(one server run) as the unit of replication (docs/verdicts.md; the method version is in every verdict).
It passes only when the whole confidence interval shows the candidate better by the margin
``--sskj-margin`` and by the run's A/A noise floor; a significant loss, an interval that straddles the bar,
a client-bound side or too few repeats fail with the users' table wording, tagged with the outcome's own word:
``[worse]`` for a significant loss, ``[equivalent]`` when the candidate is within the equivalence bound (not
better), ``[inconclusive]`` when the repeats could not decide (``[regression]`` is only the baseline gate's)
("+10.96 % Input TPS, −9.91 % TTFT P50 (95 % CI …)").  A backend named twice (``--backend marlin,marlin``)
is an A/A control: it passes when it is equivalent or inconclusive, never better or worse.  With
``--sskj-compare-expect report`` a candidate's verdict is recorded and shown, and the test skips naming
the option that enforces it.

Output agreement is a separate part of the verdict, enforced whatever ``--sskj-compare-expect`` says: both
sides' exact output token ids on a fixed set of greedy probe prompts must meet ``--sskj-agreement-min``
(default first-token agreement >= 0.95), else the test fails with ``[output-mismatch]`` naming the prompts
that diverged and at which token; the baseline's A/A control shows the engine's own nondeterminism.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.agreement import AgreementVerdict
from pytest_sskj.acceptance.compare import DECIDED, Verdict
from pytest_sskj.acceptance.matrix import Comparison
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.report.categories import CLIENT_BOUND, CRASH, verdict_tag


def test_backend_comparison(
    sskj_comparison: Comparison | None,
    sskj_acceptance: Acceptance,
    sskj_site: SiteDefaults,
    request: pytest.FixtureRequest,
) -> None:
    settings = sskj_acceptance.settings
    if sskj_comparison is None:
        pytest.skip(
            f"only one backend ({','.join(settings.backends)}): give a baseline and a candidate, "
            f"e.g. --backend marlin,flashinfer_mxfp4"
        )
    if settings.target_url:
        pytest.skip(
            f"--target-url {settings.target_url} is one running server: its backends cannot be compared; "
            f"drop --target-url to launch each backend"
        )
    comp = sskj_comparison
    sskj_acceptance.label(
        sskj_site, baseline=comp.baseline, candidate=comp.candidate, chunk=comp.chunk, C=comp.concurrency
    )
    verdict, why = sskj_acceptance.compare(comp, request.node.nodeid)
    if verdict is None:
        tag = CLIENT_BOUND if CLIENT_BOUND in why else CRASH
        pytest.fail(
            f"{tag} cannot compare {comp.candidate} with {comp.baseline} at chunk {comp.chunk} "
            f"C={comp.concurrency}: no passed repeat on one side ({why})",
            pytrace=False,
        )
    print(verdict.message())
    _report_stopping(verdict)
    agreement = sskj_acceptance.agreements.get(comp.id)
    if agreement is not None:
        _report_agreement(agreement)
        if agreement.passed is False:
            pytest.fail(agreement.message, pytrace=False)
    if comp.is_control:
        assert verdict.outcome not in DECIDED, (
            f"{verdict_tag(verdict.outcome)} A/A control: two identical servers must come out equivalent or "
            f"inconclusive, saw {verdict.outcome}: {verdict.message()}"
        )
        return
    if settings.compare_expect == "report":
        pytest.skip(
            f"verdict recorded, not enforced: {verdict.message()} — enforce it with --sskj-compare-expect better"
        )
    assert verdict.outcome == "better", f"{verdict_tag(verdict.outcome)} {verdict.message()}"


def _report_stopping(verdict: Verdict) -> None:
    """Allure: the verdict's sequential looks (which comparison, after which repeat, which statistic)."""
    from pytest_sskj.report import allure

    allure.attach_json(
        "sequential stopping decisions",
        {"design": verdict.design or "fixed", "method": verdict.method, "looks": [dict(x) for x in verdict.looks]},
    )
    for look in verdict.looks:
        print(f"  look {look.get('text', '')}")


def _report_agreement(agreement: AgreementVerdict) -> None:
    from pytest_sskj.report import allure

    ab = agreement.ab
    allure.metric_parameters(
        first_token_agreement_frac=ab.first_token_agreement_frac if ab else None,
        identical_seq_frac=ab.identical_seq_frac if ab else None,
        mean_prefix_match_tokens=ab.mean_prefix_match_tokens if ab else None,
        aa_identical_seq_frac=agreement.aa.identical_seq_frac if agreement.aa else None,
        agreement_overhead_frac=agreement.overhead_frac,
    )
    allure.attach_json("output agreement", agreement.as_dict())
    print(agreement.message)
