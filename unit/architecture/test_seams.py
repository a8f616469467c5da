"""The declared seams hold what callers use: typed engine defaults checked at registration, one locality rule,
the Launcher Protocol implemented in full by both launchers, one ServerSpec builder."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import ClassVar

import pytest

from pytest_sskj.engines import get_engine
from pytest_sskj.engines.base import EngineDefaults
from pytest_sskj.engines.registry import register
from pytest_sskj.nodes import is_local_node, node_url
from pytest_sskj.server.launcher import Launcher
from pytest_sskj.server.local import LocalLauncher
from pytest_sskj.server.ssh import SshLauncher, SshOptions
from pytest_sskj.spec import NodeCommand, ServerSpec

BASE = get_engine("embedded").defaults


def test_a_missing_default_is_an_error_when_the_engine_module_is_imported() -> None:
    fields = {k: v for k, v in BASE.items() if k != "health_timeout_s"}
    with pytest.raises(TypeError, match="health_timeout_s"):
        EngineDefaults(**fields)


def test_engine_defaults_refuse_non_positive_sizes_and_read_as_a_mapping_of_what_is_set() -> None:
    with pytest.raises(ValueError, match="isl=0"):
        replace(BASE, isl=0)
    sglang = get_engine("sglang").defaults
    assert "slo" not in sglang and sglang["health_timeout_s"] == 1800.0, dict(sglang)
    assert set(BASE) >= {"isl", "osl", "health_timeout_s", "stall_timeout_s", "slo", "search"}


def _engine(**attrs: object) -> type:
    base = type(get_engine("embedded"))
    return type("StubEngine", (base,), {"name": "stub", **attrs})


def test_registration_refuses_defaults_that_the_engine_cannot_serve() -> None:
    with pytest.raises(TypeError, match="default endpoint 'generate'"):
        register(_engine(defaults=replace(BASE, endpoint="generate")))
    with pytest.raises(TypeError, match="default backends"):
        register(_engine(defaults=replace(BASE, backends=("nope",))))
    with pytest.raises(TypeError, match="EngineDefaults record"):
        register(_engine(defaults={"isl": 1}))
    assert list(register(_engine())) == ["stub"], "a complete declaration registers"


def test_registration_names_a_missing_declaration() -> None:
    class Bare(type(get_engine("embedded"))):  # type: ignore[misc]
        _REQUIRED: ClassVar[tuple[str, ...]] = (*type(get_engine("embedded"))._REQUIRED, "brand_new_field")

    with pytest.raises(TypeError, match="does not declare brand_new_field"):
        register(Bare)


@pytest.mark.parametrize("node", ["local", "localhost", "127.0.0.1", "::1", socket.gethostname()])
def test_one_locality_rule_local_names(node: str) -> None:
    assert is_local_node(node), node
    assert node_url(node, 8000, lambda n: "10.9.9.9") == "http://127.0.0.1:8000", "a local URL is IPv4 loopback"


@pytest.mark.parametrize("node", ["601", "10.0.0.5", "fd00::5"])
def test_one_locality_rule_remote_names(node: str) -> None:
    assert not is_local_node(node)
    assert node_url(node, 9, lambda n: n) == (f"http://[{node}]:9" if ":" in node else f"http://{node}:9")
    assert node_url(node, 9, lambda n: "10.1.2.3") == "http://10.1.2.3:9", "a remote node's URL uses its address"


def test_both_launchers_implement_the_whole_launcher_protocol() -> None:
    assert isinstance(LocalLauncher(), Launcher)
    assert isinstance(SshLauncher(ssh=SshOptions()), Launcher)
    assert LocalLauncher().address("local") == "local"


def test_the_local_launcher_refuses_a_remote_node_by_the_same_rule() -> None:
    from pytest_sskj.errors import LauncherError

    with pytest.raises(LauncherError, match="node '601'"):
        LocalLauncher().start(NodeCommand("601", 0, ("true",)), __import__("pathlib").Path("/dev/null"))


def test_the_spec_builder_applies_an_override_after_the_runs_args(pytester: pytest.Pytester) -> None:
    from pytest_sskj.spec import SpecOverride, spec_from_settings
    from pytest_sskj.stash import SETTINGS_KEY

    config = pytester.parseconfigure("--sskj-server-arg=--a", "--engine", "sglang", "--tp", "2")
    s = config.stash[SETTINGS_KEY]
    plain = spec_from_settings(s, backend="parallel", chunk=512)
    assert (plain.tp, plain.extra_args, plain.instance) == (2, ("--a",), 0)
    o = SpecOverride(nodes=("n1", "n2"), tp=4, server_args=("--b",), env=(("X", "1"),), labels=(("layout", "L"),))
    spec = spec_from_settings(s, backend="parallel", chunk=512, override=o, instance=1)
    assert spec == ServerSpec(
        **{
            **vars(plain),
            "nodes": ("n1", "n2"),
            "tp": 4,
            "extra_args": ("--a", "--b"),
            "env": (*plain.env, ("X", "1")),
            "instance": 1,
            "labels": (("layout", "L"),),
        }
    )
