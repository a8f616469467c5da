"""Baseline regression gate (``--sskj-baseline REF``): every serving configuration judged against the
matching configuration of an earlier run (a release tag, a run id or ``last-release``).

``test_baseline[<backend>-chunk<c>-c<C>]`` fails with ``[regression]`` when a headline metric (input TPS,
TTFT P50, TTFT P95) is worse than the baseline's median by more than the baseline's repeat spread plus
``--sskj-regression-margin`` and the repeat ranges do not overlap; it is skipped with the reason when no
baseline was given, when the baseline has no matching point, when a recorded engine fact (version, commit,
driver, GPU) differs from the baseline's, or when the result is inconclusive; an
unexpired ``[[waiver]]`` in ``release.toml`` turns a regression into an expected failure.
"""

from __future__ import annotations

import pytest

from pytest_sskj.acceptance.matrix import ConfigKey
from pytest_sskj.acceptance.plugin import Acceptance, SiteDefaults
from pytest_sskj.history.gate import engine_differences, env_facts, judge_config
from pytest_sskj.history.importer import read_manifest
from pytest_sskj.history.plugin import BaselineGate
from pytest_sskj.report.categories import REGRESSION


def test_baseline(
    sskj_baseline_config: ConfigKey,
    sskj_acceptance: Acceptance,
    sskj_site: SiteDefaults,
    sskj_baseline: BaselineGate,
    request: pytest.FixtureRequest,
) -> None:
    key = sskj_baseline_config
    sskj_acceptance.label(sskj_site, story="baseline", backend=key.backend, chunk=key.chunk, C=key.concurrency)
    base = sskj_baseline.baseline
    if base is None:
        pytest.skip("no baseline: pass --sskj-baseline v1.3 (a release tag, a run id or last-release)")
    outs = sskj_acceptance.repeats(key)
    rows = [o.row for o in outs if o.passed]
    if not rows:
        pytest.skip(f"not judged: no repeat of {key.id} passed test_serving")
    differ = engine_differences(base, env_facts(read_manifest(sskj_acceptance.settings.run_dir)))
    if differ:
        pytest.skip(f"not judged: {base.named} is incomparable: {'; '.join(differ)}")
    config = {"backend": key.backend, "chunk": key.chunk, "concurrency": key.concurrency, "id": key.id}
    out = judge_config(
        config,
        rows,
        base,
        margin_pct=sskj_baseline.margin_pct,
        waivers=sskj_baseline.waivers,
        today=sskj_baseline.today,
    )
    verdict = out.as_verdict(key.id, base)
    verdict.update(test_id=request.node.nodeid, backend=key.backend, chunk=key.chunk, concurrency=key.concurrency)
    sskj_acceptance.record(verdict)
    if out.status in ("no_match", "inconclusive"):
        pytest.skip(f"{key.id}: {out.message}")
    if out.status == "waived":
        pytest.xfail(f"{REGRESSION} {key.id}: {out.message}")
    assert out.status == "passed", f"{REGRESSION} {key.id}: {out.message}"
