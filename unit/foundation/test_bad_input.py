"""Bad input found by a hostile-user run (issue 13) and more: each one is a ``pytest.UsageError`` at
configure time with what was wrong, what is accepted and a hint; exit status 4; nothing is launched or
written (no reports directory)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_sskj.testing.ssh_config import numbered_ssh_config
from pytest_sskj.validate import unmapped_numeric_nodes

ACCEPTANCE = Path(__file__).resolve().parents[2] / "acceptance"
EMPTY_SSH_CONFIG = "empty_ssh_config"

CASES: list[tuple[list[str], dict[str, str], str]] = [
    # from the issue
    (["--nodes", "601,,602"], {}, "*'601,,602' has an empty item between commas*"),
    (
        ["--launcher", "ssh", "--nodes", "601,602", "--sskj-ssh-config", EMPTY_SSH_CONFIG],
        {},
        "*node name(s) 601, 602 are bare numbers that no ssh configuration*0.0.2.89*",
    ),
    # issue 28: the dry run and --collect-only apply the real run's check of bare node numbers (launcher derived)
    (
        [
            "--engine",
            "sglang",
            "--nodes",
            "601-604",
            "--tp",
            "32",
            "--sskj-dry-run",
            "--sskj-ssh-config",
            EMPTY_SSH_CONFIG,
        ],
        {},
        "*node name(s) 601, 602, 603, 604 are bare numbers*would dial 601 as the IPv4 address 0.0.2.89\n"
        "*accepted: host names, or numbers mapped by --sskj-node-template or an ssh_config 'Host' entry\n"
        "*Hint: --sskj-node-template 'gpu{}'*",
    ),
    (["--nodes", "602", "--collect-only", "--sskj-ssh-config", EMPTY_SSH_CONFIG], {}, "*node name(s) 602 are bare*"),
    (["--isl", "999999999999999"], {}, "*--isl on the command line: 999999999999999 is above 10485760 tokens*"),
    (["--isl", "4K", "--osl", "16"], {}, "*--isl 4096 + --osl 16 tokens do not fit the embedded engine's*"),
    (["--engine", "sglang", "--isl", "10M"], {}, "*exceeds the context of every model*"),
    (["--isl", "8K"], {}, "*do not fit the embedded engine's 4096-token context per slot*"),
    (["--sskj-port", "70000"], {}, "*--sskj-port on the command line: 70000 is above 65535*"),
    (["--sskj-dist-init-port", "70000"], {}, "*--sskj-dist-init-port on the command line: 70000 is above 65535*"),
    (["--sskj-port=-1"], {}, "*--sskj-port on the command line: -1 must be at least 0*"),
    (
        ["--target-url", "http://"],
        {},
        "*--target-url on the command line: 'http://' is not an http(s) URL that names a host*",
    ),
    (["--target-url", "http://127.0.0.1:99999"], {}, "*has a port outside 1-65535*"),
    (["--target-url", "http://a b"], {}, "*contains white space*"),
    (["-o", "sskj_bogus=1"], {}, "*unknown pytest-sskj ini key(s) sskj_bogus*"),
    (["-o", "sskj_node=601"], {}, "*unknown pytest-sskj ini key(s) sskj_node\n*did you mean sskj_nodes*"),
    (["--dp", "4"], {}, "*embedded CPU engine has no tensor/expert/pipeline parallelism (nor data*DP4*"),
    (["--engine", "vllm", "--tp", "3", "--ep", "2"], {}, "*vLLM's expert-parallel size is TP x DP = 3; --ep 2*"),
    (
        ["--target-url", "http://127.0.0.1:30000"],
        {"SSKJ_NODES": "601-602"},
        "*--nodes (from environment variable SSKJ_NODES) would launch one*",
    ),
    (["--sskj-endpoint", "generate"], {}, "*endpoint 'generate' is not served by engine 'embedded'*"),
    (["--reports-dir", "a_file"], {}, "*--reports-dir *a_file is a file*"),
    (["--reports-dir", "a_file/below"], {}, "*lies below *a_file, which is a file*"),
    (["--reports-dir", "/proc/sskj-reports"], {}, "*--reports-dir /proc/sskj-reports cannot be created*"),
    (
        ["--engine", "vllm", "--tp", "32", "--nodes", "601-603"],
        {},
        "*--dp 1 over 3 nodes (601, 602, 603) does not divide*",
    ),
    (["--engine", "vllm", "--tp", "16"], {}, "*needs 16 GPUs per node, but nodes have 8*"),
    (["--nodes", "@inventory.toml"], {}, "*pytest reads @FILE on its command line as a file of arguments*"),
    (["--chunk=-4K"], {}, "*--chunk on the command line: '-4K' is negative*"),
    (
        ["--backend", "marlin"],
        {},
        "*unknown to engine 'embedded'\n"
        "*accepted: parallel, serial, *, microbatch, spec-self, *(the backends of engine embedded*",
    ),
    # more of our own
    (["--concurrency", "8,,16"], {}, "*'8,,16' has an empty item between commas*"),
    (["--nodes", "601,"], {}, "*'601,' has an empty item between commas*"),
    (["--sskj-ssh-port", "0"], {}, "*--sskj-ssh-port on the command line: 0 must be at least 1*"),
    (["--sskj-ssh-port", "65536"], {}, "*65536 is above 65535*"),
    ([], {"SSKJ_PORT": "99999"}, "*environment variable SSKJ_PORT: 99999 is above 65535*"),
    (["--sskj-request-rate", "0"], {}, "*--sskj-request-rate on the command line: 0 must be greater than 0 req/s*"),
    (["--run-id", "../elsewhere"], {}, "*--run-id on the command line: run id '../elsewhere' is not accepted*"),
    (["--run-id", ".hidden"], {}, "*--run-id on the command line: run id '.hidden' is not accepted*"),
    (["--target-url", "ftp://127.0.0.1:21"], {}, "*is not an http(s) URL that names a host*"),
    (["--target-url", "http://127.0.0.1:0"], {}, "*has port 0*"),
    (["--nodes", "inventory:missing.toml"], {}, "*inventory file '*missing.toml' does not exist*"),
    (["--engine", "sglang", "--sskj-endpoint", "chat", "--tp", "4", "--ep", "3"], {}, "*--ep 3 must divide --tp 4*"),
    (["--engine", "vllm", "--dp", "2", "--tp", "2", "--ep", "2"], {}, "*TP x DP = 4; --ep 2*"),
    (["--osl", "4K", "--isl", "1K"], {}, "*do not fit the embedded engine's 4096-token context*"),
    ([], {"SSKJ_NODES": "601,,602"}, "*environment variable SSKJ_NODES: '601,,602' has an empty item*"),
    # issue 40: values passed verbatim to the server refuse shell syntax (no shell will ever expand it)
    (["--model-path", "/models/$(id)"], {}, "*--model-path on the command line*holds the shell syntax '$('*"),
    (["--sskj-server-arg=--tp 8; rm -rf /"], {}, "*--sskj-server-arg*holds the shell syntax ';'*"),
    (["--sskj-container-image", "img`id`"], {}, "*--sskj-container-image*holds the shell syntax '`'*"),
    ([], {"SSKJ_MODEL_PATH": "/m | tee x"}, "*SSKJ_MODEL_PATH*holds the shell syntax '|'*"),
    # issue 40: a plan that large is refused at once, naming its size and the limit (it hung past 2 minutes)
    (
        ["--isl", ",".join(map(str, range(1, 201))), "--osl", ",".join(map(str, range(1, 201)))],
        {},
        "*the run plans *,000 serving points (40000 shapes x *), more than 10,000\n"
        "*accepted: at most 10,000 points per run*\n*Hint: *--sskj-grid-limit N*",
    ),
    (
        [
            "--concurrency",
            ",".join(map(str, range(1, 201))),
            "--chunk",
            ",".join(map(str, range(32, 3232, 32))),
            "--repeats",
            "1000",
        ],
        {},
        "*the run plans * serving points (100 chunks x 200 concurrencies x * x 1000 repeats), more than 10,000*",
    ),
]


@pytest.mark.parametrize(("args", "env", "expected"), CASES, ids=[" ".join(c[0]) or str(c[1]) for c in CASES])
def test_bad_input_is_a_usage_error_with_what_accepted_and_hint_and_launches_nothing(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (pytester.path / "a_file").write_text("not a directory\n")
    (pytester.path / EMPTY_SSH_CONFIG).write_text("")
    (pytester.path / "inventory.toml").write_text('nodes = ["601", "602"]\n')
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    result = pytester.runpytest(*args)
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, got {result.ret}: {err[-2000:]}"
    result.stderr.fnmatch_lines(expected.split("\n"))
    assert "accepted:" in err and "Hint:" in err, f"expected what/accepted/hint, got: {err}"
    assert not (pytester.path / "reports").exists(), "nothing may be written or launched after a usage error"


def test_the_acceptance_suite_without_the_plugin_says_it_needs_the_plugin(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(str(ACCEPTANCE), "-p", "no:sskj", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*the acceptance suite needs the pytest-sskj plugin*", "*Hint: drop -p no:sskj*"])
    assert "fixture 'sskj_point' not found" not in result.stdout.str()


def test_the_inventory_spelling_that_survives_pytest_expands_the_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "inv.toml").write_text('nodes = ["601", {host = "gpu602"}]\n')
    pytester.makepyfile("def test_nodes(sskj_settings): assert sskj_settings.nodes == ('601', 'gpu602')")
    cfg = numbered_ssh_config(pytester.path, ["601"])  # a bare 601 must be an ssh_config Host, dry run or not
    res = pytester.runpytest("--nodes", "inventory:inv.toml", "--sskj-dry-run", "--sskj-ssh-config", str(cfg))
    assert res.ret == pytest.ExitCode.OK, res.stderr.str()
    res.stdout.fnmatch_lines(["*nodes: 601,gpu602*"])


def test_ini_node_template_expands_bare_node_numbers(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsskj_node_template = gpu{}\n")
    pytester.makepyfile("def test_nodes(sskj_settings): assert sskj_settings.nodes == ('gpu601', 'gpu602')")
    pytester.runpytest("--nodes", "601-602", "--sskj-dry-run", "-p", "no:cacheprovider").assert_outcomes()
    pytester.runpytest("--nodes", "601-602", "--launcher", "local", "--reports-dir", "r").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("config", "unmapped"),
    [
        ("Host 601\n  HostName 10.0.0.1\n", ["602"]),
        ("Host 60?\n  HostName node%h.lan\n", []),
        ("Host * !602\n  HostName gw.lan\n", ["602"]),
        ("Host 601 602\n  HostName %h\n", ["601", "602"]),
        ("Host 601\n  User me\n", ["601", "602"]),
        ("Include other.conf\n", []),  # only ssh could tell: no verdict
        ("Match host 601\n  HostName 10.0.0.1\n", []),
    ],
)
def test_without_an_ssh_client_the_configuration_is_read_to_judge_bare_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str, unmapped: list[str]
) -> None:
    """A GPU image without openssh-client (the H100 test machine's): bare numbers are still judged, from the
    configuration's Host blocks, instead of being let through to a launch that cannot dial them."""
    import pytest_sskj.validate as validate

    monkeypatch.setattr(validate.shutil, "which", lambda name: None)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(config)
    assert unmapped_numeric_nodes(["601", "602", "gpu603"], cfg) == unmapped


def test_numeric_nodes_mapped_by_an_ssh_config_are_accepted(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host 601\n  HostName 10.0.0.1\n")
    assert unmapped_numeric_nodes(["601", "602", "gpu603"], cfg) == ["602"]


def test_an_ssh_launch_without_an_ssh_client_is_a_usage_error_and_a_dry_run_still_plans(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen on the H100 image (no openssh-client): the launch went ahead and every point crashed on "could not run
    'ssh'"; now it is refused at parse time, and the dry run plans without dialling."""
    import pytest_sskj.validate as validate

    monkeypatch.setattr(validate.shutil, "which", lambda name: None)
    cfg = pytester.path / "ssh_config"
    cfg.write_text("Host gpu*\n  User me\n")
    args = ("--launcher", "ssh", "--nodes", "gpu1,gpu2", "--sskj-ssh-config", str(cfg), "-p", "no:cacheprovider")
    res = pytester.runpytest_inprocess(str(ACCEPTANCE / "test_serving.py"), *args)
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-1500:]
    res.stderr.fnmatch_lines(["*no 'ssh' is on PATH here*", "*Hint: apt-get install -y openssh-client*"])
    dry = pytester.runpytest_inprocess(str(ACCEPTANCE / "test_serving.py"), *args, "--sskj-dry-run")
    assert dry.ret == 0, dry.stdout.str()[-1500:]


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (ssh) to judge a file")
@pytest.mark.parametrize(
    ("content", "shown"),
    [
        (b"this is not ssh configuration\n", "*ssh cannot use it:*"),
        (b"Include {self}\n", "*ssh cannot use it:*"),
        (b"Host gpu1\n  HostName \xff\xfe\n  Bogus\xff yes\n", "*ssh cannot use it:*"),
    ],
    ids=["garbage", "include-loop", "non-utf8"],
)
def test_an_ssh_config_that_ssh_cannot_read_is_a_usage_error_in_sshs_words(
    pytester: pytest.Pytester, content: bytes, shown: str
) -> None:
    """Issue 40: these were accepted at parse time (and the non-UTF-8 one raised a traceback)."""
    cfg = pytester.path / "cfg"
    cfg.write_bytes(content.replace(b"{self}", str(cfg).encode()))
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    res = pytester.runpytest("--launcher", "ssh", "--nodes", "gpu1", "--sskj-ssh-config", str(cfg), "--sskj-dry-run")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, got {res.ret}: {res.stderr.str()[-1500:]}"
    res.stderr.fnmatch_lines([shown, "*accepted: an ssh_config file ssh reads*", "*Hint: check it with `ssh -F*"])
    assert "Traceback" not in res.stderr.str() + res.stdout.str()
