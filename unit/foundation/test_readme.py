"""The README stays true: its options table lists every option, and its commands are the CI's."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sskj.subsystems import OPTIONS

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
    gym = "--no-deps reasoning-gym==0.1.25"
    assert f"pip install {gym}" in readme and f"pip install -q {gym}" in ci, "CI installs the README's reasoning-gym"
    for command in ("pytest unit/", "pytest unit/ --run-slow -m slow"):
        assert f"\n{command}" in readme and f"\n{command}\n" in ci, f"README and .ci/run must both run {command!r}"
    assert "\npytest acceptance/\n" in readme and "pytest acceptance/ --run-id" in ci


def test_example_profile_loads(pytester: pytest.Pytester) -> None:
    from pytest_sskj.stash import SETTINGS_KEY

    # bare node numbers need an ssh_config mapping (or a node template) before an ssh run is accepted
    (pytester.path / "ssh_config").write_text("Host 601 602 603 604\n  HostName 127.0.0.1\n")
    config = pytester.parseconfigure(
        "--profile",
        str(ROOT / "profiles" / "kimi3-pro6000-sglang.toml"),
        "--sskj-ssh-config",
        "ssh_config",
        "--sskj-dry-run",  # plans without an ssh client (the GPU image has none)
    )
    s = config.stash[SETTINGS_KEY]
    assert (s.engine, s.tp, s.ep, s.nodes, s.chunks) == (
        "sglang",
        32,
        4,
        ("601", "602", "603", "604"),
        (4096, 8192, 16384),
    )


@pytest.mark.slow
def test_unit_suite_as_typed_runs_on_every_core_and_stays_debuggable(tmp_path: Path) -> None:
    """`pytest unit/` turns xdist on (unit/conftest.py); `-n 0`, `-p no:xdist` and `--pdb` keep pytest serial."""
    import os
    import subprocess
    import sys

    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 or more cores (the default stays serial on one core)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env["SSKJ_REPORTS_DIR"] = str(tmp_path)
    target = "unit/foundation/test_parsing.py"

    def run(*extra: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "-x", *extra],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"expected a green run of {target} {extra}, got {proc.returncode}:\n{proc.stdout[-2000:]}"
        )
        return proc.stdout

    assert "workers [" in run(), "expected `pytest unit/...` as typed to run xdist workers"
    assert "workers [" in run("--run-slow", "-n", "2"), "expected `-n 2` to run the slow phase on xdist workers"
    for extra in (("-n", "0"), ("-p", "no:xdist"), ("--pdb",), ("--run-slow",)):
        out = run(*extra)
        assert "workers [" not in out, f"expected {' '.join(extra)} to run serially, saw xdist workers:\n{out[-800:]}"
