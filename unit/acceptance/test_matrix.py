"""Matrix enumeration and execution order of the acceptance suite (pure logic)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_sskj.acceptance import matrix
from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY
from pytest_sskj.validate import plan_size


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    return pytester.parseconfigure(*args).stash[SETTINGS_KEY]


def test_users_matrix_has_36_points_with_readable_ids(pytester: pytest.Pytester) -> None:
    # bare node numbers need an ssh_config mapping (or a node template) before an ssh run is accepted
    (pytester.path / "ssh_config").write_text("Host 601 602 603 604\n  HostName 127.0.0.1\n")
    s = _settings(
        pytester,
        "--sskj-ssh-config",
        "ssh_config",
        "--sskj-dry-run",  # plans without an ssh client (the GPU image has none)
        "--engine",
        "sglang",
        "--nodes",
        "601-604",
        "--tp",
        "32",
        "--ep",
        "4",
        "--backend",
        "marlin,flashinfer_mxfp4",
        "--chunk",
        "4K,8K,16K",
        "--concurrency",
        "8,16",
    )
    points = matrix.build_points(s)
    assert plan_size(s) == (len(points), "3 chunks x 2 concurrencies x 2 backends x 3 repeats"), (
        f"the plan's counted size (checked against the limit before enumeration) is the enumerated one: "
        f"{plan_size(s)} vs {len(points)} points"
    )
    ids = [p.id for p in points]
    assert len(points) == 36, f"expected 2 backends x 3 chunks x 2 C x 3 repeats = 36, got {len(points)}"
    assert len(set(ids)) == 36
    assert "flashinfer_mxfp4-chunk8192-c8-r2" in ids
    assert [c.id for c in matrix.comparisons(s)] == [
        f"flashinfer_mxfp4-vs-marlin-chunk{c}-c{k}" for c in (4096, 8192, 16384) for k in (8, 16)
    ]


def test_grouped_order_starts_each_server_spec_once(pytester: pytest.Pytester) -> None:
    s = _settings(
        pytester,
        "--engine",
        "sglang",
        "--backend",
        "marlin,flashinfer_mxfp4",
        "--chunk",
        "4K,8K",
        "--concurrency",
        "8,16",
        "--repeats",
        "2",
    )
    assert not matrix.interleaves(s), "sglang restarts are expensive: points must be grouped by server"
    order = matrix.execution_order(matrix.build_points(s), interleave=False)
    groups = [p.spec_group for p in order]
    switches = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(switches) == len(set(groups)) == 4, f"a server spec came back after another: {switches}"
    assert [p.id for p in order[:4]] == [
        "marlin-chunk4096-c8-r1",
        "marlin-chunk4096-c8-r2",
        "marlin-chunk4096-c16-r1",
        "marlin-chunk4096-c16-r2",
    ]


def test_embedded_repeats_are_interleaved_abab(pytester: pytest.Pytester) -> None:
    s = _settings(pytester, "--chunk", "512", "--backend", "parallel,serial", "--concurrency", "8")  # default changed
    assert matrix.interleaves(s)
    order = matrix.execution_order(matrix.build_points(s), interleave=True)
    assert [p.id for p in order] == [
        "parallel-chunk512-c8-r1",
        "serial-chunk512-c8-r1",
        "parallel-chunk512-c8-r2",
        "serial-chunk512-c8-r2",
        "parallel-chunk512-c8-r3",
        "serial-chunk512-c8-r3",
    ]


def test_single_backend_and_target_url_do_not_interleave(pytester: pytest.Pytester) -> None:
    s = _settings(pytester)
    assert not matrix.interleaves(replace(s, backends=("parallel",)))
    assert not matrix.interleaves(replace(s, target_url="http://127.0.0.1:1"))
    assert matrix.comparisons(replace(s, backends=("parallel",))) == []


def test_curves_and_search_configs_cover_every_backend(pytester: pytest.Pytester) -> None:
    s = _settings(pytester, "--chunk", "256,512", "--concurrency", "4,8", "--backend", "parallel,serial")
    assert [c.id for c in matrix.curves(s)] == ["parallel-c4", "parallel-c8", "serial-c4", "serial-c8"]
    assert matrix.curves(s)[0].chunks == (256, 512)
    assert matrix.search_configs(s) == [("parallel", 256), ("serial", 256), ("parallel", 512), ("serial", 512)]
    search_point = matrix.Point("serial", 512, 32, 0, 0, kind="search")
    assert search_point.id == "serial-chunk512-c32-search"


def test_a_backend_named_twice_is_an_aa_control_on_two_separate_servers(pytester: pytest.Pytester) -> None:
    from pytest_sskj.server.spec import spec_from_settings

    s = _settings(pytester, "--chunk", "512", "--backend", "parallel,parallel,serial", "--concurrency", "8")
    assert matrix.arms(s.backends) == ("parallel", "parallel@2", "serial")
    order = matrix.execution_order(matrix.build_points(s), interleave=matrix.interleaves(s))
    assert [p.id for p in order[:3]] == [
        "parallel-chunk512-c8-r1",
        "parallel@2-chunk512-c8-r1",
        "serial-chunk512-c8-r1",
    ]
    comps = matrix.comparisons(s)
    assert [(c.id, c.is_control) for c in comps] == [
        ("parallel@2-vs-parallel-chunk512-c8", True),
        ("serial-vs-parallel-chunk512-c8", False),
    ], "the A/A control comes first so its noise floor is known before the candidate is judged"
    one = spec_from_settings(s, backend="parallel", chunk=512)
    two = one.with_(instance=matrix.arm_instance("parallel@2"))
    assert matrix.arm_backend("parallel@2") == "parallel" and two.instance == 1
    assert one != two and one.key() != two.key(), "the pool must launch the A/A arm as its own server"


def test_a_backend_named_three_times_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    res = pytester.runpytest("--backend", "parallel,parallel,parallel")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()
    assert "lists a name more than twice (twice is an A/A control)" in res.stdout.str() + res.stderr.str()
