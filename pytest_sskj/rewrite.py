"""Keep pytest's assertion rewriting off the plugin's own modules.

pytest marks every package of a ``pytest11`` distribution for assertion rewriting, so each
``pytest_sskj`` module imported lazily during a session is parsed with ``ast.parse`` on first import.
The plugin imports modules lazily from worker threads too (the bench thread, the record writer), and on
CPython 3.11.7 two threads building AST objects at the same time corrupt the shared AST recursion counter:
the next import dies with ``SystemError: AST constructor recursion depth mismatch`` (seen in ``pytest
unit/bench`` and in the full suite).  The plugin's modules carry no assertions that need rewriting (tests do,
and they stay rewritten), so the package is unmarked as soon as the plugin loads.
"""

from __future__ import annotations

from typing import Any

__all__ = ["unmark_plugin_package"]

_PACKAGE = "pytest_sskj"


def unmark_plugin_package(pluginmanager: Any) -> bool:
    """Drop ``pytest_sskj`` from the rewrite hook's marked names; True when it was marked."""
    hook = getattr(pluginmanager, "rewrite_hook", None)
    marked = getattr(hook, "_must_rewrite", None)
    if not isinstance(marked, set) or _PACKAGE not in marked:
        return False
    marked.discard(_PACKAGE)
    cache = getattr(hook, "_marked_for_rewrite_cache", None)
    if isinstance(cache, dict):
        for name in [n for n in cache if n == _PACKAGE or n.startswith(_PACKAGE + ".")]:
            del cache[name]
    return True
