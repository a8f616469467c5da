"""Self-tests run with none of the user's pytest-sskj settings in the environment.

A user's shell (or CI: ``.ci/run`` sets ``SSKJ_RUN_ID`` for the outer ``pytest unit/`` so the release mark can
name the run) may carry ``SSKJ_*`` settings; the outer session honours them, but every test, and every pytester
or subprocess run it starts, sees only what the test itself sets.  Infrastructure variables that are not settings
(``SSKJ_REQUIRE_*``, ``SSKJ_VLLM_VENV``, ``SSKJ_SGLANG_PYTHON``, ``SSKJ_NETNS_*``, ...) are kept.
"""

from __future__ import annotations

import pytest

from pytest_sskj.options import OPTIONS


@pytest.fixture(autouse=True)
def _no_user_settings_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for opt in OPTIONS:
        monkeypatch.delenv(opt.env, raising=False)
