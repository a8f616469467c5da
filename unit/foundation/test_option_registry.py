"""The option registry is filled by the subsystems (issue 23): settings resolve through it, and a ``--profile``
that names nothing says what is accepted (the profile names, or a path to a .toml) with a did-you-mean hint."""

from __future__ import annotations

import pytest

from pytest_sskj.registry import Registry, RegistryError
from pytest_sskj.subsystems import OPTIONS, SUBSYSTEMS, build_registry


def test_every_subsystem_fills_its_slots_once() -> None:
    reg = build_registry()
    assert {"slo", "agreement", "size_seq"} <= set(reg.parsers), f"value parsers registered: {sorted(reg.parsers)}"
    (engine,) = [o for o in reg.options if o.dest == "engine"]
    assert reg.default_engine in engine.choices, (reg.default_engine, engine.choices)
    again = build_registry()
    with pytest.raises(RegistryError, match="twice"):
        SUBSYSTEMS[0].register(again)


def test_an_unfilled_slot_is_a_wiring_error_naming_its_owner() -> None:
    reg = Registry(OPTIONS)
    with pytest.raises(RegistryError, match=r"pytest_sskj\.engines\.register"):
        reg.engine("embedded")
    with pytest.raises(RegistryError, match=r"pytest_sskj\.profile\.register"):
        reg.load_profile("x", [])
    reg.add_parser("slo", str)
    with pytest.raises(RegistryError, match="two parsers"):
        reg.add_parser("slo", str)


def test_an_unknown_profile_lists_the_profiles_and_hints_the_closest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_never_runs(): raise AssertionError('ran after a usage error')")
    result = pytester.runpytest("--profile", "pro6000/kimi3-sglang-p", "-p", "no:cacheprovider")
    err = result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, f"expected exit 4, got {result.ret}: {err}"
    assert "profile 'pro6000/kimi3-sglang-p' does not exist" in err, err
    assert "accepted: a profile name from profiles/ (" in err and "pro6000/kimi3-sglang-pd" in err, err
    assert "or a path to a .toml file" in err, err
    assert "did you mean --profile pro6000/kimi3-sglang-pd?" in err, err
    assert "a non-empty path" not in err, f"the path kind's generic line is not what --profile accepts: {err}"


def test_a_flag_or_setting_registered_by_two_subsystems_is_refused() -> None:
    reg = Registry(OPTIONS)
    (tp,) = [o for o in OPTIONS if o.dest == "tp"]
    with pytest.raises(RegistryError, match="--tp"):
        reg.add_options(tp)


def test_every_row_comes_from_a_subsystem_that_owns_it() -> None:
    """``pytest_sskj/options/`` holds the row type only; the rows are the subsystems' (each once)."""
    owners = [m for m in SUBSYSTEMS if m.__name__.endswith(".options")]
    assert {m.__name__.split(".")[1] for m in owners} >= {"server", "deploy", "acceptance"}, owners
    dests = [o.dest for o in OPTIONS]
    assert len(dests) == len(set(dests)), "a setting registered twice"
