"""The README stays true: its options table lists every option, and its commands are the CI's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.options import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_readme_options_table_lists_every_option_with_ini_and_env() -> None:
    text = (ROOT / "README.md").read_text()
    for o in OPTIONS:
        row = next((line for line in text.splitlines() if line.startswith(f"| `{o.flags[0]}`")), None)
        assert row is not None, f"README options table has no row for {o.flags[0]}"
        assert f"`{o.ini}`" in row and f"`{o.env}`" in row, f"row for {o.flags[0]} lacks ini/env names: {row}"


def test_ci_runs_exactly_the_readme_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install torch==2.13.0" in readme and "python -m pip install -q torch==2.13.0" in ci
    assert 'pip install -e ".[dev]"' in readme and 'pip install -q -e ".[dev]"' in ci
    for command in ("pytest -n auto --dist worksteal unit/", "pytest unit/ --run-slow -m slow"):
        assert f"\n{command}" in readme and f"\n{command}\n" in ci, f"README and .ci/run must both run {command!r}"
    assert "\npytest acceptance/\n" in readme and "pytest acceptance/ --run-id" in ci


def test_example_profile_loads(pytester: pytest.Pytester) -> None:
    from pytest_sskj.stash import SETTINGS_KEY

    # bare node numbers need an ssh_config mapping (or a node template) before an ssh run is accepted
    (pytester.path / "ssh_config").write_text("Host 601 602 603 604\n  HostName 127.0.0.1\n")
    config = pytester.parseconfigure(
        "--profile", str(ROOT / "profiles" / "kimi3-pro6000-sglang.toml"), "--sskj-ssh-config", "ssh_config"
    )
    s = config.stash[SETTINGS_KEY]
    assert (s.engine, s.tp, s.ep, s.nodes, s.chunks) == (
        "sglang",
        32,
        4,
        ("601", "602", "603", "604"),
        (4096, 8192, 16384),
    )
