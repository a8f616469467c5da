"""The plugin surface: registration, --help, usage errors, markers, dry run, report header, manifest."""

from __future__ import annotations

import json

import pytest

from pytest_sskj.subsystems import OPTIONS
from pytest_sskj.testing.ssh_config import numbered_ssh_config


def test_help_shows_the_sskj_group_with_every_option(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    assert result.ret == 0
    out = result.stdout.str()
    assert "pytest-sskj: LLM serving acceptance" in out
    missing = [o.flags[0] for o in OPTIONS if o.flags[0] not in out]
    assert not missing, f"options missing from --help: {missing}"
    for o in OPTIONS:
        assert o.env in out.replace("\n", " ").replace("  ", " ") or o.env.replace("_", "") in out.replace(" ", ""), (
            o.env
        )


@pytest.mark.slow  # whole sessions in subprocesses (seconds each): the slow phase (issue 26)
def test_plugin_registers_via_entry_point_and_can_be_disabled(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    ok = pytester.runpytest_subprocess("--engine", "embedded")
    ok.assert_outcomes(passed=1)
    disabled = pytester.runpytest_subprocess("-p", "no:sskj", "--engine", "embedded")
    assert disabled.ret == pytest.ExitCode.USAGE_ERROR
    disabled.stderr.fnmatch_lines(["*unrecognized arguments: --engine*"])
    plain = pytester.runpytest_subprocess("-p", "no:sskj")
    plain.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["--nodes", "604-601"], {}, "*--nodes on the command line: range '604-601' runs backwards*"),
        (["--chunk", "0"], {}, "*--chunk on the command line: '0' must be at least 1*"),
        (["--concurrency", "-1"], {}, "*--concurrency on the command line: -1 must be at least 1*"),
        (
            ["--engine", "sglang", "--tp", "32", "--nodes", "601-603"],
            {},
            "*32 GPUs cannot be split evenly over 3 node(s)*",
        ),
        (
            ["--engine", "sglang", "--tp", "32", "--nodes", "601-602"],
            {},
            "*needs 16 GPUs per node, but nodes have 8*",
        ),
        (["--engine", "sglang", "--tp", "8", "--ep", "3"], {}, "*--ep 3 must divide --tp 8*"),
        (
            ["--engine", "sglang", "--backend", "parallel"],
            {},
            "*backend(s) parallel unknown to engine 'sglang'*",
        ),
        (["--backend", "marlin"], {}, "*backend(s) marlin unknown to engine 'embedded'*"),
        (["--engine", "tgi"], {}, "*'tgi' is not one of embedded, sglang, vllm*"),
        (["--profile", "nope.toml"], {}, "*profile 'nope.toml' does not exist*"),
        (["--isl", "16KB"], {}, "*--isl on the command line*is not a size*"),
        ([], {"SSKJ_REPEATS": "zero"}, "*environment variable SSKJ_REPEATS: 'zero' is not an integer*"),
        (["--launcher", "ssh"], {}, "*--launcher ssh needs --nodes*"),
        (["--target-url", "localhost:8000"], {}, "*is not an http(s) URL*"),
        (
            ["--target-url", "http://x:1", "--nodes", "601"],
            {},
            "*--target-url benchmarks a server that is already*",
        ),
        (["--tp", "2"], {}, "*embedded CPU engine has no tensor/expert/pipeline parallelism*"),
        (["--sskj-slo", "ttft=3"], {}, "*is not a gate*"),
        (
            ["--chunk", "4K", "--expect-best-chunk", "8K"],
            {},
            "*--expect-best-chunk 8192 is not one of the chunks*",
        ),
        (["--sskj-env", "NOEQUALS"], {}, "*'NOEQUALS' is not KEY=VALUE*"),
    ],
)
def test_bad_values_fail_at_parse_time_with_what_and_hint(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines([expected])
    assert "Hint" in result.stderr.str() or "accepted" in result.stderr.str()
    assert not (pytester.path / "reports").exists(), "nothing may be written or launched after a usage error"


def test_profile_with_unknown_keys_lists_the_known_ones(pytester: pytest.Pytester) -> None:
    p = pytester.path / "bad.toml"
    p.write_text('engine = "sglang"\ntensor_parallel = 8\n')
    result = pytester.runpytest("--profile", str(p))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown key(s) tensor_parallel; known keys:*tp*"])


def test_markers_are_registered_with_descriptions(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "*@pytest.mark.gpu(count=1, min_capability=None, arch=None, min_free_gib=None)*",
            "*@pytest.mark.acceptance*",
            "*@pytest.mark.slow*",
        ]
    )


def test_dry_run_prints_matrix_and_every_node_command_and_launches_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        @pytest.mark.parametrize("point", ["a", "b"])
        def test_serving(point):
            raise AssertionError("a dry run must not run tests")
        """
    )
    result = pytester.runpytest(
        "--sskj-dry-run",
        "--engine",
        "sglang",
        "--nodes",
        "601-604",
        "--sskj-ssh-config",  # 601-604 as ssh_config Host entries: unmapped bare numbers are refused, dry run or not
        str(numbered_ssh_config(pytester.path)),
        "--tp",
        "32",
        "--ep",
        "4",
        "--backend",
        "marlin,flashinfer_mxfp4",
        "--model-path",
        "/models/Kimi-K3",
        "--sskj-env",
        "SUDO_PASSWORD=hunter2hunter2",
    )
    assert result.ret == 0
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*pytest-sskj dry run: nothing is launched*",
            "*test matrix (2 tests):*",
            "*test_serving?a?*",
            "*servers (6 specs*",
            "*[marlin-chunk4096]*",
            "*601 (rank 0, serves HTTP): *python3 -m sglang.launch_server --model-path /models/Kimi-K3 --tp-size 32 "
            "--ep-size 4 --moe-runner-backend marlin --chunked-prefill-size 4096 --disable-radix-cache --host 0.0.0.0 "
            "--port 30000 --nnodes 4 --node-rank 0 --dist-init-addr 601:5000*",
            "*604 (rank 3): *--node-rank 3 --dist-init-addr 601:5000*",
            "*[flashinfer_mxfp4-chunk16384]*",
        ]
    )
    assert "hunter2" not in out and "SUDO_PASSWORD='***REDACTED***'" in out
    assert "1 passed" not in out and "failed" not in out


def test_report_header_states_resolved_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--run-id", "hdr-1", "--isl", "1K")
    result.stdout.fnmatch_lines(
        [
            "sskj: run hdr-1 -> reports*hdr-1",
            "sskj: engine embedded, launcher local, nodes local, TP1/EP1/DP1/PP1",
            "sskj: backends microbatch,parallel | chunks 256,512 | C 16 | ISL 1024 / OSL 16 | 40 req x 3",
        ]
    )


def test_the_header_says_which_sskj_variables_the_command_line_overrides(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 40: an SSKJ_* variable that disagrees with the command line is overridden (CLI > env, as documented)
    and the header says so, so that a stale export is seen; one the command line does not set is not named."""
    monkeypatch.setenv("SSKJ_ISL", "2K")
    monkeypatch.setenv("SSKJ_REPEATS", "2")
    pytester.makepyfile("def test_x(sskj_settings): assert (sskj_settings.isl, sskj_settings.repeats) == (1024, 2)")
    result = pytester.runpytest("--run-id", "hdr-2", "--isl", "1K")
    result.stdout.fnmatch_lines(
        ["sskj: note: the command line overrides SSKJ_ISL from the environment (CLI > SSKJ_* > ini > profile)"]
    )
    assert "SSKJ_REPEATS from" not in result.stdout.str()
    result.assert_outcomes(passed=1)


def test_manifest_written_at_start_and_completed_without_secrets(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        """
        import json
        def test_manifest_exists_during_the_run(run_dir):
            data = json.loads((run_dir / "manifest.json").read_text())
            assert data["status"] == "running"
        """
    )
    result = pytester.runpytest("--run-id", "m-1", "--sskj-env", "API_TOKEN=tok-very-secret", "--sskj-env", "X=1")
    result.assert_outcomes(passed=1)
    path = pytester.path / "reports" / "m-1" / "manifest.json"
    text = path.read_text()
    data = json.loads(text)
    assert data["status"] == "finished" and data["exitstatus"] == 0 and data["counts"]["passed"] == 1
    assert data["run_id"] == "m-1" and data["pytest_sskj"]["version"]
    assert data["settings"]["env"] == ["API_TOKEN", "X"]
    assert "tok-very-secret" not in text
    assert (pytester.path / "reports" / ".gitignore").read_text().strip().endswith("*")
