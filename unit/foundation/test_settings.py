"""Settings resolution: precedence CLI > SSKJ_* env > sskj_* ini > profile > engine default > default."""

from __future__ import annotations

import pytest

from pytest_sskj.settings import Settings
from pytest_sskj.stash import SETTINGS_KEY
from pytest_sskj.subsystems import OPTIONS


def _settings(pytester: pytest.Pytester, *args: str) -> Settings:
    config = pytester.parseconfigure(*args)
    return config.stash[SETTINGS_KEY]


def test_defaults_give_the_embedded_cpu_matrix(pytester: pytest.Pytester) -> None:
    s = _settings(pytester)
    assert (s.engine, s.backends, s.isl, s.osl, s.concurrencies, s.requests, s.repeats) == (
        "embedded",
        ("microbatch", "parallel"),  # issue 12: the default A/B has a real winner; C=16 keeps it off client-bound
        512,
        16,
        (16,),
        40,
        3,
    )
    assert s.launcher == "local" and s.nodes == ()
    assert s.sources["engine"] == "default" and s.sources["isl"] == "engine"


def test_sglang_engine_defaults_are_the_users_kimi_preset(pytester: pytest.Pytester) -> None:
    s = _settings(pytester, "--engine", "sglang")
    assert s.backends == ("marlin", "flashinfer_mxfp4")
    assert s.chunks == (4096, 8192, 16384)
    assert (s.isl, s.osl, s.concurrencies, s.endpoint) == (16384, 1, (8, 16), "generate")


def test_precedence_cli_over_env_over_ini_over_profile(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = pytester.path / "p.toml"
    profile.write_text('requests = 10\nrepeats = 2\nisl = "1K"\nosl = 4\nmodel = "Kimi-K3"\n')
    pytester.makeini("[pytest]\nsskj_requests = 20\nsskj_repeats = 5\nsskj_isl = 2K\n")
    monkeypatch.setenv("SSKJ_REQUESTS", "30")
    monkeypatch.setenv("SSKJ_ISL", "3K")
    s = _settings(pytester, "--profile", str(profile), "--requests", "40")
    assert s.requests == 40 and s.sources["requests"] == "cli"
    assert s.isl == 3072 and s.sources["isl"] == "env"
    assert s.repeats == 5 and s.sources["repeats"] == "ini"
    assert s.osl == 4 and s.sources["osl"] == "profile"
    assert s.model_name == "Kimi-K3"
    assert s.warmup == 1 and s.sources["warmup"] == "default"


def test_profile_supplies_nodes_parallel_sizes_server_args_and_env(pytester: pytest.Pytester) -> None:
    profile = pytester.path / "kimi.toml"
    profile.write_text(
        'platform = "pro6000"\nengine = "sglang"\nnodes = "601-604"\ntp = 32\nep = 4\n'
        'server_args = ["--trust-remote-code"]\n[env]\nNCCL_IB_DISABLE = "1"\nHF_TOKEN = "hf_secret_value"\n'
    )
    # bare node numbers need an ssh_config mapping (or a node template) before an ssh run is accepted
    (pytester.path / "ssh_config").write_text("Host 601 602 603 604\n  HostName 127.0.0.1\n")
    s = _settings(pytester, "--profile", str(profile), "--sskj-ssh-config", "ssh_config", "--sskj-dry-run")
    assert s.engine == "sglang" and s.nodes == ("601", "602", "603", "604") and (s.tp, s.ep) == (32, 4)
    assert s.server_args == ("--trust-remote-code",)
    assert s.env_dict == {"NCCL_IB_DISABLE": "1", "HF_TOKEN": "hf_secret_value"}
    assert s.launcher == "ssh"
    assert "hf_secret_value" not in repr(s.as_dict())


def test_settings_object_is_frozen_and_in_the_stash(pytester: pytest.Pytester) -> None:
    s = _settings(pytester)
    with pytest.raises(AttributeError):
        s.requests = 1  # type: ignore[misc]


def test_every_option_is_a_settings_field() -> None:
    fields = set(Settings.__dataclass_fields__)
    assert {o.dest for o in OPTIONS} <= fields


@pytest.mark.slow
def test_xdist_workers_share_the_controllers_run_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_a(sskj_settings, record_property):
            print("RUNID", sskj_settings.run_id)
        def test_b(sskj_settings):
            print("RUNID", sskj_settings.run_id)
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "-s", "--run-id", "shared-1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    manifest = pytester.path / "reports" / "shared-1" / "manifest.json"
    assert manifest.is_file(), f"expected {manifest}"


def test_env_lists_use_semicolons_for_env_pairs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSKJ_ENV", "A=1;B=two")
    monkeypatch.setenv("SSKJ_SERVER_ARGS", "--x=1 --y")
    s = _settings(pytester)
    assert s.env == (("A", "1"), ("B", "two"))
    assert s.server_args == ("--x=1", "--y")


def test_resume_reuses_the_run_id(pytester: pytest.Pytester) -> None:
    (pytester.path / "reports" / "20261129-101010-abcd" / "points" / "p-r1").mkdir(parents=True)
    (pytester.path / "reports" / "20261129-101010-abcd" / "points" / "p-r1" / "result.json").write_text("{}")
    # a resume needs the run's recorded measurement settings (issue 12 resume guard): record the defaults'
    import json

    from pytest_sskj.acceptance.resume import MEASUREMENT_FILE, fingerprint

    fp = fingerprint(_settings(pytester))
    (pytester.path / "reports" / "20261129-101010-abcd" / MEASUREMENT_FILE).write_text(json.dumps(fp))
    s = _settings(pytester, "--resume", "20261129-101010-abcd")
    assert s.run_id == "20261129-101010-abcd"
