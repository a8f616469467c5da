"""The users' command as a dry run: every serving point, every comparison and each node's launch command."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.testing.ssh_config import numbered_ssh_config

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
USERS_COMMAND = (
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
    "--isl",
    "16K",
    "--osl",
    "1",
    "--sskj-dry-run",
)


def _cluster(pytester: pytest.Pytester) -> tuple[str, str]:
    """The users' nodes 601-604 are ssh_config Host entries, as on their cluster: a dry run refuses bare
    numbers that no ssh configuration maps, as a real run does."""
    return ("--sskj-ssh-config", str(numbered_ssh_config(pytester.path)))


def test_users_command_lists_36_points_6_comparisons_and_per_node_commands(pytester: pytest.Pytester) -> None:
    res = pytester.runpytest_inprocess(
        str(ACCEPTANCE),
        *USERS_COMMAND,
        *_cluster(pytester),
        "-p",
        "no:cacheprovider",
        "--reports-dir",
        str(pytester.path / "reports"),
    )
    lines = res.stdout.lines
    serving = [ln for ln in lines if "test_serving.py::test_serving[" in ln]
    assert len(serving) == 36, f"expected 2 backends x 3 chunks x 2 C x 3 repeats = 36, got {len(serving)}"
    assert serving[0].strip() == "acceptance/test_serving.py::test_serving[marlin-chunk4096-c8-r1]"
    comparisons = [ln.strip() for ln in lines if "test_backend_comparison[" in ln]
    assert comparisons == [
        f"acceptance/test_backend_comparison.py::test_backend_comparison[flashinfer_mxfp4-vs-marlin-chunk{c}-c{k}]"
        for c in (4096, 8192, 16384)
        for k in (8, 16)
    ]
    commands = [ln.strip() for ln in lines if ln.strip().startswith(("601 (", "602 (", "603 (", "604 ("))]
    assert len(commands) == 24, f"6 server specs x 4 nodes, got {len(commands)}"
    res.stdout.fnmatch_lines(
        [
            "*[[]flashinfer_mxfp4-chunk8192[]]*",
            "*601 (rank 0, serves HTTP): python3 -m sglang.launch_server --tp-size 32 --ep-size 4 --moe-runner-backend "
            "flashinfer_mxfp4 --chunked-prefill-size 8192 --disable-radix-cache --host 0.0.0.0 --port 30000 --nnodes 4 "
            "--node-rank 0 --dist-init-addr 601:5000",
            "*604 (rank 3): python3 -m sglang.launch_server * --node-rank 3 --dist-init-addr 601:5000",
        ]
    )
    assert not (pytester.path / "reports").exists() or not list((pytester.path / "reports").rglob("points")), (
        "a dry run measures nothing"
    )


def test_dry_run_prints_the_sequential_design_the_power_plan_and_unsupported_percentiles(
    pytester: pytest.Pytester,
) -> None:
    common = (
        *_cluster(pytester),
        "-p",
        "no:cacheprovider",
        "--reports-dir",
        str(pytester.path / "reports"),
        "--requests",
        "40",
    )
    res = pytester.runpytest_inprocess(
        str(ACCEPTANCE), *USERS_COMMAND, *common, "--sskj-max-repeats", "10", "--sskj-slo", "p99_ttft_ms<3000"
    )
    out = res.stdout.str()
    assert "verdicts: group-sequential" in out and "looks after 3..10 repeats per side" in out, out
    assert "plan: to decide 5 % at an assumed 3.0 % spread (90% power): 9 repeats per side" in out, out
    assert "WARNING: SLO gate p99_ttft_ms: 40 requests per point cannot support a p99" in out, out
    assert "use --requests 299 or more" in out, out
    strict = pytester.runpytest_inprocess(
        str(ACCEPTANCE), *USERS_COMMAND, *common, "--sskj-slo", "p99_ttft_ms<3000", "--sskj-percentile-strict"
    )
    assert strict.ret == 4, strict.stdout.str() + strict.stderr.str()
    assert "use --requests 299 or more" in strict.stderr.str()
    low = pytester.runpytest_inprocess(str(ACCEPTANCE), *USERS_COMMAND, *common, "--sskj-max-repeats", "2")
    assert low.ret == 4 and "--sskj-max-repeats 2 is below --repeats 3" in low.stderr.str(), low.stderr.str()
