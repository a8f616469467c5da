"""Composable profiles: platform, model and deployment layers; precedence unchanged; unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.__main__ import main
from pytest_sskj.profile import list_profiles, load_profile, profile_keys
from pytest_sskj.stash import SETTINGS_KEY
from pytest_sskj.subsystems import OPTIONS
from pytest_sskj.testing.ssh_config import numbered_ssh_config

ROOT = Path(__file__).resolve().parents[2]
ACCEPTANCE = ROOT / "acceptance"


def _tree(base: Path, deployment: str, platform: str = "", model: str = "") -> Path:
    (base / "profiles" / "platforms").mkdir(parents=True)
    (base / "profiles" / "models").mkdir()
    (base / "profiles" / "lab").mkdir()
    (base / "profiles" / "platforms" / "chip.toml").write_text(
        platform or 'name = "chipx"\narch = "SM120"\ngpus_per_node = 4\n[env]\nA = "platform"\nB = "platform"\n'
    )
    (base / "profiles" / "models" / "m.toml").write_text(
        model or 'name = "Model-M"\npath = "/models/m"\ntrust_remote_code = true\nquantization = "MXFP4"\n'
    )
    f = base / "profiles" / "lab" / "dep.toml"
    f.write_text(deployment)
    return f


_DEP = (
    'engine = "sglang"\nnodes = "601-602"\nnode_template = "gpu{}"\ntp = 8\nslo_tier = "S2"\nserver_args = ["--x=1"]\n'
    '[env]\nB = "deployment"\n[layers]\nplatform = "chip"\nmodel = "m"\n'
)


def test_layers_combine_by_reference_with_the_origin_of_every_value(pytester: pytest.Pytester) -> None:
    _tree(pytester.path, _DEP)
    config = pytester.parseconfigure("--profile", "lab/dep", "--sskj-dry-run")  # no ssh client needed to plan
    s = config.stash[SETTINGS_KEY]
    assert (s.platform, s.gpus_per_node, s.model_name, s.model_path) == ("chipx", 4, "Model-M", "/models/m")
    assert s.server_args == ("--trust-remote-code", "--x=1"), "model's flag first, the deployment's added"
    assert s.env_dict == {"A": "platform", "B": "deployment"}, "env merges key by key, the deployment wins"
    assert [str(g) for g in s.slo] == ["p95_ttft_ms<3000", "p95_tpot_ms<50"], "slo_tier S2 is the users' S2 SLO"
    prof = load_profile(pytester.path / "profiles" / "lab" / "dep.toml", profile_keys(OPTIONS))
    assert prof.origin("gpus_per_node").name == "chip.toml" and prof.origin("model_path").name == "m.toml"
    assert prof.facts["platform"]["arch"] == "SM120" and prof.facts["model"]["quantization"] == "MXFP4"


def test_precedence_cli_over_env_over_profile_layers(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(pytester.path, _DEP)
    monkeypatch.setenv("SSKJ_MODEL_PATH", "/env/model")
    s = pytester.parseconfigure("--profile", "lab/dep", "--sskj-gpus-per-node", "8", "--sskj-dry-run").stash[
        SETTINGS_KEY
    ]
    assert s.gpus_per_node == 8 and s.sources["gpus_per_node"] == "cli"
    assert s.model_path == "/env/model" and s.sources["model_path"] == "env"
    assert s.sources["platform"] == "profile"


@pytest.mark.parametrize(
    ("layer", "text", "names"),
    [
        ("platform", 'name = "x"\ngpu_count = 8\n', ("gpu_count", "gpus_per_node", "chip.toml")),
        ("model", 'name = "M"\nquant = "fp8"\n', ("quant", "quantization", "m.toml")),
        ("deployment", _DEP + "colour = 1\n", ("colour", "slo_tier", "dep.toml")),
    ],
)
def test_unknown_key_in_any_layer_names_the_key_the_accepted_keys_and_the_file(
    pytester: pytest.Pytester, layer: str, text: str, names: tuple[str, ...]
) -> None:
    if layer == "platform":
        _tree(pytester.path, _DEP, platform=text)
    elif layer == "model":
        _tree(pytester.path, _DEP, model=text)
    else:
        _tree(pytester.path, text.replace('[env]\nB = "deployment"\n', "").replace("colour = 1\n", "") + "")
        dep = pytester.path / "profiles" / "lab" / "dep.toml"
        dep.write_text("colour = 1\n" + dep.read_text())
    res = pytester.runpytest("--profile", "lab/dep")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    for n in names:
        assert n in err, f"expected {n!r} in the usage error, saw:\n{err}"


def test_missing_layer_file_lists_known_layers(pytester: pytest.Pytester) -> None:
    _tree(pytester.path, _DEP.replace('platform = "chip"', 'platform = "nochip"'))
    res = pytester.runpytest("--profile", "lab/dep")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*layers.platform = 'nochip' names no file*known platform layers: chip*"])


def test_every_shipped_profile_resolves_and_dry_runs(pytester: pytest.Pytester) -> None:
    shipped = list_profiles([ROOT])
    assert len(shipped) >= 10, f"expected the seeds' profiles to ship, found {[n for n, _ in shipped]}"
    # the profiles' numbered nodes (601-608) are ssh_config Host entries, as on the users' cluster: a dry run
    # refuses bare numbers no ssh configuration maps, as a real run does
    cfg = str(numbered_ssh_config(pytester.path))
    for name, _ in shipped:  # in-process: a dry run launches nothing, a subprocess would only add start-up
        res = pytester.runpytest_inprocess(
            str(ACCEPTANCE),
            "--sskj-ssh-config",
            cfg,
            "--profile",
            name,
            "--sskj-dry-run",
            "-p",
            "no:cacheprovider",
            "--reports-dir",
            str(pytester.path / "reports" / name.replace("/", "-")),
        )
        out = res.stdout.str()
        assert res.ret == 0, f"profile {name}: dry run exited {res.ret}\n{out[-2000:]}\n{res.stderr.str()[-2000:]}"
        assert "nothing is launched" in out and "test matrix" in out, f"profile {name}: no plan printed"
        if name.endswith("-matrix"):
            assert "layouts: " in out and "recommendation: " in out, f"profile {name}: no layout matrix in the plan"
        if name.endswith("-pd"):
            assert "[group prefill (prefill)]" in out and "[router]" in out, f"profile {name}: no PD groups/router"


def test_profiles_command_lists_and_shows_one_resolved(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles"]) == 0
    listed = capsys.readouterr().out
    for name in ("pro6000/kimi3-sglang-pd", "pro6000/kimi3-sglang-prefill", "h20/dsv4-sglang-matrix"):
        assert name in listed, f"expected {name} in `profiles`, saw:\n{listed}"
    assert main(["profiles", "show", "pro6000/kimi3-sglang-prefill"]) == 0
    shown = capsys.readouterr().out
    assert "arch = SM120" in shown and "platforms/pro6000.toml" in shown
    assert "slo = none" in shown, "the prefill A/B has no serving SLO"
    assert main(["profiles", "show", "no/such"]) == 2
    assert "known:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("", "*profile*bad.toml' is empty: it sets nothing*"),
        ('[env]\nA = ["x", "y"]\n', "*env.A is a list; an environment value is a string or a number*"),
        ("[env]\nA = { b = 1 }\n", "*env.A is a dict; an environment value is a string or a number*"),
        ('server_args = "--trust-remote-code"\n', "*'server_args' must be an array of strings*"),
        ("server_args = [1, 2]\n", "*'server_args' must be an array of strings*"),
        ("concurrency = [[8], [16]]\n", "*'concurrencies' must be a value or an array of values*"),
        ("concurrency = -8\n", "*-8*"),
        ("requests = 99999999999\n", "*99999999999 is above*"),
        ('model_path = "/models/k3; reboot"\n', "*holds the shell syntax ';'*"),
    ],
    ids=[
        "empty",
        "env-list",
        "env-table",
        "server-args-string",
        "server-args-numbers",
        "nested",
        "negative",
        "huge",
        "shell-in-model-path",
    ],
)
def test_a_profile_value_of_the_wrong_shape_is_a_usage_error_naming_it(
    pytester: pytest.Pytester, text: str, shown: str
) -> None:
    """Issue 40: these were accepted (a string of server args became one argument per character, a list as an
    environment value became "A=['x', 'y']")."""
    (pytester.path / "bad.toml").write_text(text)
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    res = pytester.runpytest("--profile", str(pytester.path / "bad.toml"), "-p", "no:cacheprovider")
    assert res.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4 for {text!r}, got {res.ret}"
    res.stderr.fnmatch_lines([shown])
    assert not (pytester.path / "reports").exists(), "nothing is written after a usage error"
