"""The baseline regression gate's judgement (synthetic repeats; the real-engine proof is
``test_history_embedded.py``) and its refusals at configure time."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from pytest_sskj.history.gate import Baseline, Waiver, judge_config, load_waivers, refusals, resolve_baseline
from unit.history.conftest import make_run

CFG = {"backend": "parallel", "chunk": 256, "concurrency": 8, "id": "parallel-chunk256-c8"}
FACTS = {"engine": "embedded", "shape": "ISL 512 / OSL 16", "layout": "TP1/EP1/DP1/PP1"}


def _rows(tps: list[float], ttft: list[float] | None = None) -> list[dict[str, object]]:
    ttft = ttft or [100.0] * len(tps)
    return [
        {
            "backend": "parallel",
            "chunk": 256,
            "concurrency": 8,
            "status": "passed",
            "kind": "serve",
            "input_throughput": v,
            "median_ttft_ms": t,
            "p95_ttft_ms": t * 1.5,
        }
        for v, t in zip(tps, ttft, strict=True)
    ]


def _base(tps: list[float], ttft: list[float] | None = None) -> Baseline:
    return Baseline("v1.3", "runA", "release v1.3", FACTS, tuple(_rows(tps, ttft)), "test")


def test_same_config_within_the_baseline_spread_passes() -> None:
    out = judge_config(CFG, _rows([96.0, 101.0, 99.0]), _base([100.0, 104.0, 95.0]), margin_pct=5.0)
    assert out.status == "passed", out.message
    assert out.message.startswith("within tolerance of release v1.3: Input TPS regressed 1.0 % since release v1.3")


def test_a_slowdown_beyond_spread_and_margin_is_a_regression_in_the_users_words() -> None:
    out = judge_config(
        CFG, _rows([60.0, 62.0, 58.0], [130.0, 128.0, 135.0]), _base([100.0, 104.0, 95.0]), margin_pct=5.0
    )
    assert out.status == "regression", out.message
    assert (
        "Input TPS regressed 40.0 % since release v1.3 (100 -> 60, median of 3 vs 3 repeats; tolerance " in out.message
    )
    assert "TTFT P95 regressed 30.0 % since release v1.3" in out.message, out.message
    tps = out.metrics[0]
    assert tps["spread_pct"] == pytest.approx(5.0) and tps["tolerance_pct"] == pytest.approx(10.0)


def test_a_slowdown_whose_repeats_overlap_the_baseline_is_inconclusive_not_a_verdict() -> None:
    out = judge_config(CFG, _rows([70.0, 110.0, 72.0]), _base([100.0, 102.0, 98.0]), margin_pct=5.0)
    assert out.status == "inconclusive", out.message
    assert "the repeat ranges overlap — add --repeats" in out.message


def test_no_matching_point_names_what_the_baseline_has() -> None:
    cfg = dict(CFG, concurrency=16, id="parallel-chunk256-c16")
    out = judge_config(cfg, _rows([1.0]), _base([100.0]), margin_pct=5.0)
    assert out.status == "no_match"
    assert "release v1.3 (run runA) has no passed repeat of parallel-chunk256-c16 (it has: parallel-chunk256-c8)" in (
        out.message
    )


def test_waivers_excuse_a_regression_until_they_expire() -> None:
    slow, base = _rows([50.0, 51.0, 49.0]), _base([100.0, 101.0, 99.0])
    waivers = load_waivers({"waiver": [{"point": "parallel-*", "reason": "ticket 42", "expires": "2026-12-31"}]})
    assert waivers == [Waiver("parallel-*", "ticket 42", dt.date(2026, 12, 31))]
    live = judge_config(CFG, slow, base, margin_pct=5.0, waivers=waivers, today=dt.date(2026, 12, 1))
    assert live.status == "waived" and "waived until 2026-12-31: ticket 42" in live.message
    late = judge_config(CFG, slow, base, margin_pct=5.0, waivers=waivers, today=dt.date(2027, 1, 1))
    assert late.status == "regression" and "(waiver expired 2026-12-31: ticket 42)" in late.message
    with pytest.raises(ValueError, match="needs point, reason and expires"):
        load_waivers({"waiver": [{"point": "x"}]})


def test_baselines_of_another_shape_or_engine_are_refused() -> None:
    base = _base([100.0])
    assert refusals(dict(FACTS, shape="ISL 1024 / OSL 16"), base) == [
        "the baseline ran ISL 512 / OSL 16, this run ISL 1024 / OSL 16"
    ]
    assert refusals(dict(FACTS, engine="sglang"), base) == ["engine 'embedded' in the baseline, 'sglang' here"]
    assert refusals(dict(FACTS), base) == []


def test_baseline_refs_resolve_tags_run_ids_and_last_release(tmp_path: Path) -> None:
    import json

    reports = tmp_path / "reports"
    make_run(reports, "runA", [100.0])
    make_run(reports, "runB", [90.0])
    (reports / "releases").mkdir()
    for tag, run, at in (("v1.3", "runA", "2026-11-01T00:00:00+0000"), ("v1.4", "runB", "2026-11-02T00:00:00+0000")):
        (reports / "releases" / f"{tag}.json").write_text(json.dumps({"tag": tag, "run_id": run, "marked_at": at}))
    assert resolve_baseline("v1.3", reports, None).run_id == "runA"
    assert resolve_baseline("last-release", reports, None).label == "release v1.4"
    assert resolve_baseline("runA", reports, None).label == "run runA"
    with pytest.raises(ValueError, match=r"no release tag or run id 'v9' .*release tags: v1.3, v1.4"):
        resolve_baseline("v9", reports, None)


def test_bad_baseline_and_database_options_are_usage_errors(pytester: pytest.Pytester) -> None:
    reports = pytester.path / "reports"
    make_run(reports, "runA", [100.0])
    pytester.makepyfile(test_x="def test_x(): pass")
    common = ["--reports-dir", str(reports), "-p", "no:cacheprovider"]
    res = pytester.runpytest_inprocess("--sskj-baseline", "runA", "--isl", "1024", *common)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        [
            "*--sskj-baseline runA: run runA is not comparable with this run: the baseline ran "
            "ISL 512 / OSL 16, this run ISL 1024 / OSL 16*"
        ]
    )
    res = pytester.runpytest_inprocess("--sskj-baseline", "v7", *common)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--sskj-baseline v7: no release tag or run id 'v7'*latest runs: runA*"])
    res = pytester.runpytest_inprocess("--sskj-db", "mysql://u:hunter22@h/d", *common)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--sskj-db*'mysql://u:***REDACTED***@h/d': database 'mysql' is not supported*"])
    assert "hunter22" not in res.stderr.str()


def test_client_bound_repeats_void_the_claim_they_could_fake() -> None:
    slow = _rows([50.0, 51.0, 49.0])
    slow[1]["client_bound"], slow[1]["point_id"] = True, "parallel-chunk256-c8-r2"
    out = judge_config(CFG, slow, _base([100.0, 101.0, 99.0]), margin_pct=5.0)
    assert out.status == "inconclusive", out.message
    assert "this run's repeat(s) parallel-chunk256-c8-r2 were client-bound" in out.message
    base = _rows([100.0, 101.0, 99.0])
    base[0]["client_bound"], base[0]["point_id"] = True, "parallel-chunk256-c8-r1"
    bound_base = Baseline("v1.3", "runA", "release v1.3", FACTS, tuple(base), "test")
    slow[1]["client_bound"] = False
    assert judge_config(CFG, slow, bound_base, margin_pct=5.0).status == "regression", "a lower bound still regressed"
    same = judge_config(CFG, _rows([100.0, 100.0, 100.0]), bound_base, margin_pct=5.0)
    assert same.status == "inconclusive" and "release v1.3's repeat(s) parallel-chunk256-c8-r1" in same.message


def test_a_pd_run_and_an_aggregated_run_are_incomparable_unless_asked_explicitly() -> None:
    """Issue 14: PD points compare against aggregated ones only through an explicit cross-deployment comparison."""
    from pytest_sskj.history.gate import env_facts, incomparable

    group = {"tp": 4, "ep": 4, "dp": 1, "pp": 8}
    pd = {"kind": "pd", "groups": [{"role": "prefill", **group}, {"role": "decode", **group, "tp": 32, "pp": 1}]}
    base = env_facts({"settings": {"engine": "sglang", "isl": 16384, "osl": 1}})
    here = env_facts({"settings": {"engine": "sglang", "isl": 16384, "osl": 1, "deployment": pd}})
    assert base["deployment"] == "aggregated"
    assert here["deployment"] == "pd: prefill TP4/EP4/DP1/PP8, decode TP32/EP4/DP1/PP1", here["deployment"]
    why = incomparable(here, base)
    assert why == [f"deployment 'aggregated' in the baseline, {here['deployment']!r} here"], why
    legacy = {k: v for k, v in base.items() if k != "deployment"}  # recorded before the fact existed
    assert incomparable(base, legacy) == [], "old records describe aggregated runs"
