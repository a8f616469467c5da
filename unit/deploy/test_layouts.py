"""Layouts and shapes: parsing, fit against nodes x GPUs, the matrix ids and the run order that reuses a server."""

from __future__ import annotations

import itertools

import pytest

from pytest_sskj.acceptance import matrix
from pytest_sskj.deploy.layouts import build_shapes, layout_problems, parse_layout, resolve_layouts
from pytest_sskj.stash import SETTINGS_KEY


@pytest.mark.parametrize(
    ("token", "sizes"),
    [("tp2dp4", (2, 4, 1, 1)), ("tp32ep4", (32, 1, 4, 1)), ("pp8tp4ep4", (4, 1, 4, 8)), ("TP8DP1", (8, 1, 1, 1))],
)
def test_layout_tokens(token: str, sizes: tuple[int, int, int, int]) -> None:
    lay = parse_layout(token)
    assert (lay.tp, lay.dp, lay.ep, lay.pp) == sizes


@pytest.mark.parametrize("bad", ["tp", "tp2x", "tp2tp4", "dp0", "t2"])
def test_bad_layout_tokens_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="layout"):
        parse_layout(bad)


def test_profile_layout_tables_are_selected_by_name_with_their_args() -> None:
    tables = [{"name": "fast", "tp": 4, "dp": 2, "server_args": ["--x"]}, {"name": "tp8dp1", "tp": 8}]
    lays = resolve_layouts("fast,tp2dp4", tables)
    assert [(x.name, x.tp, x.dp, x.server_args) for x in lays] == [("fast", 4, 2, ("--x",)), ("tp2dp4", 2, 4, ())]
    assert [x.name for x in resolve_layouts(None, tables)] == ["fast", "tp8dp1"]
    with pytest.raises(ValueError, match="unknown key"):
        resolve_layouts(None, [{"name": "x", "tensor": 2}])


def test_fit_against_nodes_and_gpus() -> None:
    assert layout_problems(parse_layout("tp8dp1"), nnodes=1, gpus_per_node=8) == []
    assert "needs TPxPPxDP = 16 GPUs" in layout_problems(parse_layout("tp8dp2"), nnodes=1, gpus_per_node=8)[0]
    assert "split evenly" in layout_problems(parse_layout("tp6"), nnodes=4, gpus_per_node=8)[0]
    assert "EP 3 must divide TP 8" in layout_problems(parse_layout("tp8ep3"), nnodes=1, gpus_per_node=8)[0]


def test_shapes_grid_pairs_and_limit() -> None:
    assert build_shapes((1024, 16384), (128, 1)) == ((1024, 128), (1024, 1), (16384, 128), (16384, 1))
    assert build_shapes((1024, 16384), (128, 1), mode="pairs") == ((1024, 128), (16384, 1))
    assert build_shapes((1024, 16384), (128, 1), limit=1) == ((1024, 128),)
    with pytest.raises(ValueError, match="as many ISLs as OSLs"):
        build_shapes((1, 2, 3), (1,), mode="pairs")


def test_layout_matrix_reuses_each_layouts_server_across_shapes_and_concurrencies(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfigure(
        "--engine", "sglang", "--layout", "tp2dp4,tp8dp1", "--isl", "1K,16K", "--osl", "128,1",
        "--sskj-shape-mode", "pairs", "--backend", "auto", "--chunk", "8K", "--concurrency", "8,16", "--repeats", "2",
    )  # fmt: skip
    s = config.stash[SETTINGS_KEY]
    pts = matrix.execution_order(matrix.build_points(s), interleave=matrix.interleaves(s))
    assert len(pts) == 2 * 2 * 2 * 2
    assert pts[0].id == "tp2dp4-isl1024-osl128-auto-chunk8192-c8-r1"
    specs = [matrix.spec_for(s, p).key() for p in pts]
    changes = sum(1 for a, b in itertools.pairwise(specs) if a != b)
    assert changes == 1, "one server start per layout: every shape and concurrency of a layout runs on it"
    spec = matrix.spec_for(s, pts[-1])
    assert (spec.tp, spec.dp) == (8, 1)
    runner_shape = {p.shape for p in pts}
    assert runner_shape == {(1024, 128), (16384, 1)}
    assert matrix.search_configs(s) == [], "with layouts the search runs per layout x shape in test_recommendation"


def test_layouts_that_do_not_fit_are_a_usage_error_naming_them(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest("--engine", "sglang", "--nodes", "601-602", "--layout", "tp8dp2,tp16dp2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*layout tp16dp2 (TP16/DP2/EP1/PP1) needs TPxPPxDP = 32 GPUs, but 2 node(s) x 8 GPUs = 16*"]
    )
    res = pytester.runpytest("--engine", "sglang", "--layout", "tp8dp1", "--sskj-expect-layout", "tp4dp2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--sskj-expect-layout tp4dp2 is not one of the layouts tp8dp1*"])


def test_size_flags_with_layouts_are_refused(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest("--engine", "sglang", "--tp", "8", "--layout", "tp8dp1,tp4dp2")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*--tp and --layout both set parallel sizes*"])
