"""Layers run one way (issue 23): the option table, the schema and settings import no subsystem.

``settings`` resolves what only a subsystem knows (value parsers, engines, profiles, layouts, the cross-setting
checks) through :class:`pytest_sskj.registry.Registry`; ``options`` asks the engine registry for ``--engine``'s
choices only when they are needed.  Imports under ``if TYPE_CHECKING:`` are annotations, not dependencies.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from unit.source_trees import parsed

PKG = Path(__file__).resolve().parents[2] / "pytest_sskj"
SUBSYSTEMS = ("acceptance", "deploy", "engines", "profile", "report", "slo", "validate", "server", "history", "bench")
FOUNDATION = (
    "settings.py",
    "schema.py",
    "parsing.py",
    "registry.py",
    *(f"options/{p.name}" for p in sorted((PKG / "options").glob("*.py"))),
)


def _runtime_imports(path: Path) -> list[str]:
    """Every ``pytest_sskj.*`` module imported at module level outside ``if TYPE_CHECKING:``."""
    tree = parsed(path)
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom) and sub.module and sub.module.startswith("pytest_sskj"):
                out.extend([sub.module] + [f"{sub.module}.{a.name}" for a in sub.names])
            elif isinstance(sub, ast.Import):
                out.extend(a.name for a in sub.names if a.name.startswith("pytest_sskj"))
    return out


@pytest.mark.parametrize("name", FOUNDATION)
def test_the_foundation_imports_no_subsystem(name: str) -> None:
    bad = sorted({m for m in _runtime_imports(PKG / name) for s in SUBSYSTEMS if m.startswith((f"pytest_sskj.{s}",))})
    assert not bad, f"{name} imports the subsystem module(s) {bad}; ask pytest_sskj/registry.py instead"


def test_importing_the_option_table_and_settings_loads_no_engine() -> None:
    code = (
        "import sys, pytest_sskj.options, pytest_sskj.settings, pytest_sskj.schema; "
        "print(sorted(m for m in sys.modules if m.startswith(('pytest_sskj.engines', 'pytest_sskj.deploy', "
        "'pytest_sskj.acceptance', 'pytest_sskj.profile', 'pytest_sskj.validate', 'pytest_sskj.slo'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", f"importing options/settings/schema loaded subsystem modules: {out}"
