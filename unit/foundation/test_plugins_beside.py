"""The suites beside other people's pytest plugins (issue 54): the self-tests' inner pytest runs load exactly the
plugins the project installs and tests, and a foreign plugin's warning is shown, never raised by the repository's
``filterwarnings = error``.  On the H100 test machine pytest-benchmark, preinstalled in its Python, failed 91
self-tests from inside their inner runs; pytest-asyncio's configure-time warning stopped ``pytest unit/`` at once.
CI's unit phase runs ``pytest unit/`` with five real foreign plugins installed (.ci/foreign_plugins.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sskj.testing.plugins import OWN_PLUGIN_DISTRIBUTIONS, foreign_warning_filters, inner_run_addopts

ROOT = Path(__file__).resolve().parents[2]

LOADED = """
import json, pathlib

def pytest_configure(config):
    names = sorted({dist.project_name for _, dist in config.pluginmanager.list_plugin_distinfo()})
    pathlib.Path("loaded.json").write_text(json.dumps(names))
"""


def _normalized(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_inner_runs_load_only_the_plugins_the_project_installs_and_tests(pytester: pytest.Pytester) -> None:
    """Every installed plugin outside pytest-sskj, pytest-xdist, pytest-timeout and allure-pytest is blocked in an
    inner run (here at least hypothesis and anyio, which the dev install brings; on a GPU box pytest-benchmark)."""
    pytester.makeconftest(LOADED)
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    pytester.runpytest("-q").assert_outcomes(passed=1)
    import json

    loaded = {_normalized(n) for n in json.loads((pytester.path / "loaded.json").read_text())}
    assert "pytest-sskj" in loaded, f"expected the inner run to load pytest-sskj itself, loaded {sorted(loaded)}"
    assert loaded <= OWN_PLUGIN_DISTRIBUTIONS, (
        f"expected an inner run to load only {sorted(OWN_PLUGIN_DISTRIBUTIONS)}, it loaded also "
        f"{sorted(loaded - OWN_PLUGIN_DISTRIBUTIONS)} (PYTEST_ADDOPTS: {os.environ.get('PYTEST_ADDOPTS')!r})"
    )


FOREIGN_PLUGIN = """
import warnings

import pytest


class ForeignWarning(UserWarning):
    pass


def pytest_configure(config):
    warnings.warn(ForeignWarning("the foreign plugin configured itself"))


def pytest_report_header(config):
    return "foreign plugin loaded in this session"


@pytest.fixture(autouse=True)
def _foreign_warns_in_every_test():
    warnings.warn(ForeignWarning("the foreign plugin warned inside a test"))
"""


def _foreign_site(site: Path) -> Path:
    """A distribution ``foreign-plug`` with a ``pytest11`` entry point, installed into ``site`` (a PYTHONPATH entry)."""
    site.mkdir()
    (site / "foreign_plug.py").write_text(FOREIGN_PLUGIN)
    info = site / "foreign_plug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: foreign-plug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pytest11]\nforeign = foreign_plug\n")
    return site


@pytest.mark.slow
def test_a_foreign_plugin_warns_without_failing_the_suite_and_inner_runs_never_load_it(tmp_path: Path) -> None:
    """The suite itself, run with a foreign plugin installed that warns at configure and in every test: the session
    is green, the warnings are in its summary, and the inner-run check above still finds only our plugins."""
    site = _foreign_site(tmp_path / "site")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["SSKJ_REPORTS_DIR"] = str(tmp_path / "reports")
    target = f"{Path(__file__).relative_to(ROOT)}::test_inner_runs_load_only_the_plugins_the_project_installs_and_tests"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "-n", "0", "-rw"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    tail = out[-3000:]
    assert "foreign plugin loaded in this session" in out, f"expected the foreign plugin in the outer run:\n{tail}"
    assert proc.returncode == 0, f"expected a green run beside a warning foreign plugin, got {proc.returncode}:\n{tail}"
    for shown in ("the foreign plugin configured itself", "the foreign plugin warned inside a test"):
        assert shown in out, f"expected the foreign plugin's warning {shown!r} shown, not hidden:\n{out[-3000:]}"


def test_foreign_plugins_are_told_apart_from_ours_by_their_distribution(tmp_path: Path) -> None:
    """What the two rules above are built from, for a foreign plugin on ``sys.path`` in a fresh interpreter."""
    site = _foreign_site(tmp_path / "site")
    code = (
        "from pytest_sskj.testing.plugins import foreign_warning_filters, inner_run_addopts\n"
        "import json; print(json.dumps([inner_run_addopts().split(), foreign_warning_filters()]))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(ROOT)]))}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    import json

    addopts, filters = json.loads(proc.stdout)
    assert "no:foreign" in addopts, f"expected the foreign plugin blocked in inner runs: {addopts}"
    assert r"default::Warning:foreign_plug(\.|$)" in filters, f"expected its warnings shown, not raised: {filters}"
    for own in ("sskj", "xdist", "timeout", "allure_pytest"):
        assert f"no:{own}" not in addopts, f"expected our own plugin {own} never blocked: {addopts}"
    # in this process: hypothesis and anyio (the dev install's) are blocked in inner runs but held to their warnings
    assert "-p no:hypothesispytest" in inner_run_addopts()
    assert not any("hypothesis" in f for f in foreign_warning_filters())
