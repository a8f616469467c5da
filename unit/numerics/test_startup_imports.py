"""The plugin must not import the numerics references (or torch through them) when pytest starts."""

from __future__ import annotations

import pytest


def test_a_pytest_session_does_not_load_numerics_references(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_probe="""
        import sys

        def test_nothing_heavy_loaded(request):
            assert request.config.pluginmanager.has_plugin("sskj"), "the sskj plugin is not active"
            loaded = sorted(m for m in sys.modules if m.startswith("pytest_sskj.numerics."))
            assert loaded == [], f"numerics modules imported at startup: {loaded}"
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")  # sskj loads through its entry point
    result.assert_outcomes(passed=1)
