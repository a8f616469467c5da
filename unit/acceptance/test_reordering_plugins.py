"""A reordering plugin does not reorder the acceptance plan (issue 54, item 3).

pytest-randomly shuffles every module's tests in a hook wrapper that runs before every other plugin, and reseeds
the global RNGs before each test.  The acceptance points' order is part of the measurement's design (repeats
interleaved A B A B where restarts are cheap, grouped by server where they are not): shuffled, the embedded job ran
``r3`` before ``r1`` and blocks of one arm, while its verdicts still said "interleaved".  The plugin now sorts the
acceptance tests by their place in the plan, whatever order they arrive in; other tests keep the order they
arrived in.  The global reseeding cannot reach the workloads: every prompt, request and twin draw comes from its
own seeded generator."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RANDOMLY = """
# pytest-randomly's mechanism, for a Python without it (where it is installed, ``-p randomly`` loads the real one,
# its entry point coming first): every item shuffled in a hook wrapper that runs before every other plugin, the
# global RNG reseeded before each test, and its options.
import random

import pytest


def pytest_addoption(parser):
    parser.addoption("--randomly-seed", type=int, default=12345, dest="randomly_seed")
    parser.addoption("--randomly-dont-reorganize", action="store_false", default=True, dest="randomly_reorganize")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_collection_modifyitems(config, items):
    if config.getoption("randomly_reorganize"):
        random.Random(config.getoption("randomly_seed")).shuffle(items)
    return (yield)


def pytest_runtest_setup(item):
    random.seed(item.config.getoption("randomly_seed"))
"""


def _collected(pytester: pytest.Pytester, *args: str) -> tuple[list[str], str]:
    result = pytester.runpytest(
        str(ROOT / "acceptance"), "--co", "--reports-dir", str(pytester.path / "rep"), "--run-id", "order", *args
    )
    assert result.ret == 0, "\n".join(result.outlines[-30:])
    ids = [line.strip()[len("<Function ") : -1] for line in result.outlines if line.strip().startswith("<Function ")]
    return ids, "\n".join(result.outlines)


def test_pytest_randomly_leaves_the_acceptance_plan_in_its_order_and_the_header_says_so(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(randomly=RANDOMLY)
    pytester.syspathinsert()
    plan, header = _collected(pytester, "-p", "no:randomly")
    serving = [i for i in plan if i.startswith("test_serving[")]
    assert serving[:4] == [
        "test_serving[microbatch-chunk256-c16-r1]",
        "test_serving[parallel-chunk256-c16-r1]",
        "test_serving[microbatch-chunk256-c16-r2]",
        "test_serving[parallel-chunk256-c16-r2]",
    ], f"expected the embedded job's repeats interleaved A B A B, collected {serving}"
    assert "pytest-randomly reorders only other tests" not in header, header
    for seed in ("1", "2", "4242"):
        shuffled, header = _collected(pytester, "-p", "randomly", "--randomly-seed", seed)
        assert shuffled == plan, f"expected the plan's order after a shuffle (seed {seed}):\n  {plan}\n  {shuffled}"
        assert "acceptance tests run in the plan's order" in header, f"expected the header to say why:\n{header}"
    shuffled, header = _collected(pytester, "-p", "randomly", "--randomly-dont-reorganize")
    assert shuffled == plan and "acceptance tests run in the plan's order" not in header, header
