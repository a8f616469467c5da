"""Time and memory budgets of long-context plans (issue 48, item 3; acceptance/budget.py): each point's time budget
grows with its shape at the floor rates (a 256K-in / 4K-out point is allowed hours, a 16K-in / 1-out point the
engine's 15 minutes), pytest-timeout applies each point's own budget, the dry run states every cell's time and KV
budget and the plan's total, and a plan past ``--sskj-plan-budget`` is refused at parse time naming its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.acceptance import budget
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY
from pytest_sskj.testing.ssh_config import numbered_ssh_config

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
LONG = ("--engine", "sglang", "--model-path", "/m", "--tp", "8", "--nodes", "601", "--backend", "auto",
        "--chunk", "8K", "--isl", "16K,64K,256K", "--osl", "1,4K", "--sskj-shape-mode", "grid",
        "--concurrency", "1,8")  # fmt: skip


def _args(pytester: pytest.Pytester, *more: str) -> tuple[str, ...]:
    return (*LONG, "--sskj-ssh-config", str(numbered_ssh_config(pytester.path)), *more)


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*_args(pytester, *args)).stash[SETTINGS_KEY]


def test_a_points_budget_grows_with_its_shape_at_the_floor_rates(pytester: pytest.Pytester) -> None:
    s = _settings(pytester, "--requests", "8", "--repeats", "1")
    # 8 requests at C=8 plus the warmup: 2 waves of 8 x 256K prompts at 2000 tokens/s and 4096 steps of 200 ms
    assert budget.work_s(s, 262144, 4096, 8) == pytest.approx(2 * (8 * 262144 / 2000 + 4096 * 0.2))
    assert budget.point_budget_s(s, 16384, 1, 8) == 900.0, "a short point keeps the engine's allowance"
    assert budget.point_budget_s(s, 262144, 4096, 1) > 2 * 3600, "a 256K/4K point at C=1 is allowed hours"
    assert budget.kv_tokens(s, 262144, 4096, 8) == 8 * (262144 + 4096)
    slow = _settings(pytester, "--requests", "8", "--repeats", "1", "--sskj-budget-prefill-tps", "500")
    # at C=1: 8 requests + the warmup = 9 waves of one prompt each, now at a quarter of the rate
    assert budget.work_s(slow, 262144, 1, 1) == pytest.approx(budget.work_s(s, 262144, 1, 1) + 9 * 262144 * 3 / 2000)


def test_the_dry_run_states_every_cells_time_and_kv_and_the_plans_total(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest_inprocess(str(ACCEPTANCE), *_args(pytester, "--requests", "8", "--repeats", "1"),
                                       "--sskj-dry-run", "-p", "no:cacheprovider")  # fmt: skip
    out = res.stdout.str()
    assert res.ret == 0, out[-3000:]
    assert "budgets per point (floor rates 2000 prefill tokens/s, 200 ms TPOT; KV held at once):" in out, out
    assert "  ISL 262144 / OSL 4096 at C=8: time 1.0 h (floor-rate work 1.0 h), KV 8 x 266240 = 2.03M tokens" in out
    assert "  ISL 16384 / OSL 1 at C=1: time 15 min (floor-rate work 1 min), KV 1 x 16385 = 16K tokens" in out
    assert (
        "plan budget: 12 point(s), 9.9 h of floor-rate work (bound --sskj-plan-budget 72 h), plus a server start "
        "per point (each allowed 30 min)" in out
    ), out


def test_each_serving_point_gets_its_own_timeout(pytester: pytest.Pytester) -> None:
    items, _ = pytester.inline_genitems(str(ACCEPTANCE), *_args(pytester, "--requests", "8", "--repeats", "1"),
                                        "--sskj-dry-run", "-p", "no:cacheprovider")  # fmt: skip
    timeouts = {
        it.callspec.params["sskj_point"].id: it.get_closest_marker("timeout").args[0]  # type: ignore[attr-defined]
        for it in items
        if "sskj_point" in getattr(getattr(it, "callspec", None), "params", {})
    }
    assert timeouts, "expected the serving points to be collected"
    short, long = timeouts["isl16384-osl1-auto-chunk8192-c1-r1"], timeouts["isl262144-osl4096-auto-chunk8192-c1-r1"]
    assert short == pytest.approx(1800 + 900), "start-up plus the engine's 15 minutes"
    assert long > 1800 + 2 * 3600, f"a 256K/4K point must be allowed its hours, got {long:.0f} s"


def test_a_plan_past_its_time_bound_is_refused_naming_its_size(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest_inprocess(*_args(pytester), "--reports-dir", str(pytester.path / "r"),
                                       "-p", "no:cacheprovider")  # fmt: skip
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, err
    assert "the plan's 36 point(s) are 121.8 h of work at the floor rates, past --sskj-plan-budget 72 h" in err, err
    assert "ISL 262144 / OSL 4096 at C=1, 10.8 h" in err and "accepted:" in err and "Hint:" in err, err
    assert not (pytester.path / "r").exists(), "nothing may be written before the options are accepted"
    ok = _settings(pytester, "--sskj-plan-budget", "168")
    assert budget.plan_budget_s(ok)[1] == 36


def test_the_layout_recommendation_is_allowed_its_longest_points(pytester: pytest.Pytester) -> None:
    args = [a for a in _args(pytester, "--requests", "8", "--repeats", "1", "--layout", "tp4dp2,tp8dp1")]
    del args[args.index("--tp") : args.index("--tp") + 2]  # each layout carries its own sizes
    items, _ = pytester.inline_genitems(str(ACCEPTANCE), *args, "--sskj-dry-run", "-p", "no:cacheprovider")
    recs = [it for it in items if it.name.startswith("test_recommendation[")]
    longest = budget.point_budget_s(_settings(pytester, "--requests", "8", "--repeats", "1"), 262144, 4096, 1)
    assert recs and longest > 2 * 3600
    for rec in recs:  # one per shape: each may serve any of its layouts' points
        allowed = rec.get_closest_marker("timeout").args[0]  # type: ignore[union-attr]
        assert allowed >= 2 * longest, f"{rec.name}: 2 layouts of 256K/4K points need hours, got {allowed:.0f} s"
