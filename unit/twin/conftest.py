"""The twin's end-to-end jobs (``test_twin_e2e.py``, the slow ones of ``test_twin_speculative.py``) and its served
fidelity check (``test_fidelity_served.py``) run in their own CI phase (``.ci/twin_job.sh``: ``pytest
unit/twin/ --run-slow``), not inside the general slow phase (``pytest unit/ --run-slow -m slow``): a session
that does not name ``unit/twin`` (or a file in it) deselects them, reported as deselected.  They take minutes
and build hosts whose numbers overlap the SSH launcher tests' (docs/twin.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SERVING = ("test_twin_e2e.py", "test_fidelity_served.py", "test_twin_speculative.py")
"""Files that serve the twin for minutes: only a session naming unit/twin (or a file in it) runs them."""


def _named(config: pytest.Config) -> bool:
    for arg in config.args:
        p = Path(str(arg).split("::")[0]).resolve()
        if p == HERE or HERE in p.parents:
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _named(config):
        return
    e2e = [i for i in items if Path(str(i.path)).name in SERVING and i.get_closest_marker("slow") is not None]
    if e2e:
        config.hook.pytest_deselected(items=e2e)
        items[:] = [i for i in items if i not in e2e]
